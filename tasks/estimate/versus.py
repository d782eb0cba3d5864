"""Estimate against actual: after a run, what it took per subset (from its manifests: the distinct objects
and their bytes in the ``media`` table, the shard bytes in ``shards``; the store's size on disk), set beside
the last estimate made before that run, from the ``estimates`` table."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...schemas.estimate_rows import TOTAL
from ..manifests import OutputLayout
from ..storage import INCOMING, LOCKS


@dataclass(frozen=True)
class Actual:
    """What a run took for one subset (or ``_total``): objects and their bytes; shard bytes; store bytes
    (``_total`` only: the store is shared)."""

    subset: str
    objects: int
    bytes: int
    shard_bytes: int
    store_bytes: int | None = None
    hours: float | None = None  # ``_total`` only: the wall of the run the estimate was made for


@dataclass(frozen=True)
class Versus:
    subset: str
    estimate: dict[str, Any]  # the estimates row
    actual: Actual

    def error(self, est: float, act: float) -> float | None:
        return None if not act else (est - act) / act

    def as_dict(self) -> dict[str, Any]:
        e, a = self.estimate, self.actual
        disk_est = e["shard_bytes"] + (e["store_bytes"] if a.store_bytes is not None else 0)
        disk_act = a.shard_bytes + (a.store_bytes or 0)
        return {
            "subset": self.subset,
            "estimate_id": e["estimate_id"],
            "objects": e["objects"],
            "actual_objects": a.objects,
            "bytes": e["bytes"],
            "actual_bytes": a.bytes,
            "bytes_error": self.error(e["bytes"], a.bytes),
            "disk": disk_est,
            "actual_disk": disk_act,
            "disk_error": self.error(disk_est, disk_act),
            "hours": e.get("hours"),
            "actual_hours": a.hours,
            "hours_error": self.error(e.get("hours") or 0.0, a.hours or 0.0),
        }


_ACTUAL_SQL = """
WITH objects AS (
  SELECT DISTINCT subset, sha256, bytes FROM media
  WHERE sha256 IS NOT NULL AND bytes IS NOT NULL AND (fetch_status IS NULL OR fetch_status = 'ok')
), sh AS (SELECT subset, sum(bytes) AS shard_bytes FROM shards GROUP BY subset)
SELECT o.subset, count(*) AS objects, sum(o.bytes) AS bytes, coalesce(max(sh.shard_bytes), 0) AS shard_bytes
FROM objects o LEFT JOIN sh USING (subset) GROUP BY o.subset
"""
_TOTAL_SQL = """
SELECT count(*), coalesce(sum(bytes), 0) FROM (
  SELECT DISTINCT sha256, bytes FROM media
  WHERE sha256 IS NOT NULL AND bytes IS NOT NULL AND (fetch_status IS NULL OR fetch_status = 'ok'))
"""


def actual_figures(out: str, store: str | None = None) -> dict[str, Actual]:
    """Per subset and ``_total``, what the runs in ``out`` took ({} before any run)."""
    from ..ops import connect

    layout = OutputLayout(out)
    if not layout.fs.isdir(f"{layout.manifests}/media"):
        return {}
    con = connect(out)
    try:
        rows = con.execute(_ACTUAL_SQL).fetchall()
        total = con.execute(_TOTAL_SQL).fetchone() or (0, 0)
        shards = con.execute("SELECT coalesce(sum(bytes), 0) FROM shards").fetchone() or (0,)
    finally:
        con.close()
    result = {s: Actual(s, int(n), int(b), int(sb)) for s, n, b, sb in rows}
    result[TOTAL] = Actual(
        TOTAL, int(total[0]), int(total[1]), int(shards[0]), store_size(store or layout.store)
    )
    return result


def store_size(store: str) -> int | None:
    """Bytes of the store's objects and index on disk (partial downloads and locks left out)."""
    from ..storage import url_to_fs

    fs, root = url_to_fs(store)
    if not fs.isdir(root):
        return None
    total = 0
    for path, info in fs.find(root, detail=True).items():
        rel = path[len(root) :].lstrip("/")
        if not rel.startswith((INCOMING, LOCKS)):
            total += int(info.get("size") or 0)
    return total


def _compact(started_at: object) -> str:
    """A run's ``started_at`` (2026-12-05T08:38:00Z) as an estimate id sorts (20261205T083800Z)."""
    return str(started_at).replace("-", "").replace(":", "")


def run_hours_after(out: str, estimate_id: str) -> float | None:
    """Wall hours of the first run in ``out`` that started after estimate ``estimate_id``: its start-up and
    its flow (the run the estimate was made for; a later rerun would take less). None without such a run."""
    from ..ops import connect

    con = connect(out)
    try:
        rows = con.execute(
            "SELECT run_id, any_value(started_at), sum(seconds) FILTER (WHERE stage IN ('startup', 'run')) "
            "FROM runs WHERE subset = '_run' GROUP BY run_id ORDER BY run_id"
        ).fetchall()
    finally:
        con.close()
    after = [seconds for _run, started, seconds in rows if started and _compact(started) >= estimate_id]
    return float(after[0]) / 3600 if after and after[0] else None


def estimate_before_run(out: str) -> list[dict[str, Any]]:
    """The rows of the last estimate made before the latest run in ``out`` ([] when there is none)."""
    from ..ops import connect

    layout = OutputLayout(out)
    if not layout.fs.isdir(f"{layout.manifests}/estimates") or not layout.fs.isdir(
        f"{layout.manifests}/runs"
    ):
        return []
    con = connect(out)
    try:
        started = con.execute("SELECT max(started_at) FROM runs").fetchone()
        if not started or not started[0]:
            return []
        run_id = _compact(started[0])
        chosen = con.execute(
            "SELECT max(estimate_id) FROM estimates WHERE estimate_id <= $t", {"t": run_id}
        ).fetchone()
        if not chosen or not chosen[0]:
            return []
        cur = con.execute(
            "SELECT * FROM estimates WHERE estimate_id = $e ORDER BY subset = '_total', subset",
            {"e": chosen[0]},
        )
        names = [d[0] for d in cur.description or ()]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()
    return rows


def versus_actual(out: str, store: str | None = None) -> list[Versus]:
    """Per subset (then ``_total``), the estimate made before the latest run beside what the runs took."""
    before = estimate_before_run(out)
    if not before:
        return []
    actual = actual_figures(out, store)
    if TOTAL in actual:
        hours = run_hours_after(out, str(before[0]["estimate_id"]))
        actual[TOTAL] = replace(actual[TOTAL], hours=hours)
    return [Versus(r["subset"], r, actual[r["subset"]]) for r in before if r["subset"] in actual]
