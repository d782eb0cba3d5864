"""Per-stage wall time and throughput of runs: the ``runs`` manifest table.

The pipeline writes one row per stage and subset (``_run`` for the run-wide stages) when a run ends; the
stats report shows the latest run's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...manifests import OutputLayout, write_parquet

__all__ = [
    "RUN_WIDE",
    "StageTime",
    "batch_stage_times",
    "read_stage_times",
    "write_outside_time",
    "write_stage_times",
]

RUN_WIDE = "_run"  # the subset value of run-wide stages


@dataclass(frozen=True)
class StageTime:
    """One row of the ``runs`` table."""

    subset: str
    stage: str
    seconds: float
    items: int | None = None
    unit: str | None = None
    bytes: int | None = None
    batches: int | None = None
    skipped: int | None = None

    def row(self, run_id: str, started_at: str | None, source_format: str | None) -> dict[str, object]:
        secs = max(self.seconds, 0.0)
        return {
            "subset": self.subset,
            "run_id": run_id,
            "stage": self.stage,
            "started_at": started_at,
            "seconds": round(secs, 6),
            "items": self.items,
            "unit": self.unit,
            "bytes": self.bytes,
            "items_per_s": round(self.items / secs, 3) if self.items is not None and secs > 0 else None,
            "mb_per_s": round(self.bytes / secs / 1e6, 3) if self.bytes is not None and secs > 0 else None,
            "batches": self.batches,
            "skipped": self.skipped,
            "source_format": source_format,
        }


def write_stage_times(
    out: str,
    run_id: str,
    times: Sequence[StageTime],
    *,
    started_at: str | None = None,
    source_format: str | None,
) -> list[str]:
    """Write one ``runs`` part per subset for run ``run_id``
    (``manifests/runs/subset=<s>/part-<run>.parquet``, atomically); returns the paths."""
    import pyarrow as pa

    from ....schemas.tables import RUNS

    layout = OutputLayout(out)
    by_subset: dict[str, list[dict[str, object]]] = {}
    for t in times:
        by_subset.setdefault(t.subset, []).append(t.row(run_id, started_at, source_format))
    paths = []
    for subset, rows in sorted(by_subset.items()):
        table = pa.Table.from_pylist(rows, schema=RUNS)
        paths.append(
            write_parquet(layout.fs, f"{layout.table_dir('runs', subset)}/part-{run_id}.parquet", table)
        )
    return paths


def write_outside_time(out: str, run_id: str, seconds: float, cores: int) -> str:
    """The ``startup`` row of run ``run_id``: what its process spent outside the flow (services and imports
    before it, the summary and the services' stop after it) on a cluster of ``cores`` CPUs, written by the
    process that ran the flow (``vlmforge run``) once it has ended, as a part of its own
    (``subset=_run/part-<run>-process.parquet``). The estimate's start-up (tasks/estimate/hours.py)."""
    import pyarrow as pa

    from ....schemas.tables import RUNS

    layout = OutputLayout(out)
    row = StageTime(RUN_WIDE, "startup", seconds, cores, "cores").row(run_id, None, None)
    path = f"{layout.table_dir('runs', RUN_WIDE)}/part-{run_id}-process.parquet"
    return write_parquet(layout.fs, path, pa.Table.from_pylist([row], schema=RUNS))


def batch_stage_times(subset: str, stats: Any) -> list[StageTime]:
    """Per-subset sub-stage rows from a subset's merged :class:`~vlmforge.tasks.batch.build.BatchStats`."""
    run = stats.batches - stats.skipped_batches
    return [
        StageTime(subset, "setup", stats.setup_seconds, None, None, None, run),
        StageTime(subset, "parse", stats.parse_seconds, stats.lines if run else 0, "rows", None, run),
        StageTime(subset, "media", stats.media_seconds, stats.media_refs, "media", stats.media_bytes, run),
        StageTime(subset, "tokens", stats.tokens_seconds, stats.ok if run else 0, "samples", None, run),
        StageTime(subset, "write", stats.write_seconds, stats.lines if run else 0, "rows", None, run),
        StageTime(
            subset,
            "batches",
            stats.setup_seconds
            + stats.parse_seconds
            + stats.media_seconds
            + stats.tokens_seconds
            + stats.write_seconds,
            stats.lines,
            "rows",
            None,
            stats.batches,
            stats.skipped_batches,
        ),
    ]


def read_stage_times(out: str, run_id: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """(run id, rows of the ``runs`` table for it): the latest run when ``run_id`` is None."""
    from ..query import connect

    con = connect(out)
    try:
        if run_id is None:
            latest = con.execute("SELECT max(run_id) FROM runs").fetchone()
            run_id = latest[0] if latest else None
        if run_id is None:
            return None, []
        table = con.execute(
            "SELECT * FROM runs WHERE run_id = $run ORDER BY subset = '_run' DESC, subset, "
            "list_position(['startup','staging','catalog','batches','setup','parse','media','tokens','write','gate','publish',"
            "'validate','run'], stage), stage",
            {"run": run_id},
        ).to_arrow_table()
        rows: list[dict[str, Any]] = table.to_pylist() if table is not None else []
    finally:
        con.close()
    return run_id, rows
