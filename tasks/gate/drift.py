"""Drift: how far a subset's counts moved since the run that last published it.

The baseline is read from the run summaries (``OUT/runs/<run>.json``), not from the quality results: only a
run that actually published the subset counts, so a held-back run never becomes the new normal. The
``drift`` suite then bounds the one-row frame of :func:`drift_frame`; without a baseline every change is
null and the suite passes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..manifests import OutputLayout
from .results import read_json

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Baseline:
    """A subset's counts in its last published run: what drift is measured against."""

    run_id: str
    rows: int
    token_sum: int  # total tokens of the ok samples
    rejected: int

    @property
    def reject_rate(self) -> float:
        return self.rejected / self.rows if self.rows else 0.0


def last_published(layout: OutputLayout, subset: str, *, exclude_run: str | None = None) -> Baseline | None:
    """``subset``'s counts in the latest run (``OUT/runs/<run>.json``) that published it, or None."""
    for run_id, path in _run_summaries(layout, exclude_run):
        baseline = _published_counts(layout, path, run_id, subset)
        if baseline is not None:
            return baseline
    return None


def _run_summaries(layout: OutputLayout, exclude_run: str | None) -> Iterator[tuple[str, str]]:
    """(run id, path) of every run summary but ``exclude_run``, newest first."""
    folder = f"{layout.root}/runs"
    if not layout.fs.isdir(folder):
        return
    candidates = []
    for p in layout.fs.ls(folder, detail=False):
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(".json") or name.startswith("."):
            continue
        run_id = name[: -len(".json")]
        if run_id == exclude_run:
            continue
        try:
            when = float(layout.fs.modified(p).timestamp())
        except (OSError, NotImplementedError):
            when = 0.0
        candidates.append((when, run_id, p))
    for _when, run_id, p in sorted(candidates, reverse=True):
        yield run_id, p


def _published_counts(layout: OutputLayout, path: str, run_id: str, subset: str) -> Baseline | None:
    """``subset``'s counts in the summary at ``path`` when that run published it; None otherwise."""
    try:
        summary = read_json(layout, path)["summary"]
        entry = next(s for s in summary["subsets"] if s["subset"] == subset)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    if not entry.get("published") or entry.get("beyond_limit"):  # a trial run (--limit) sets no baseline
        return None
    stats = entry.get("stats") or {}
    try:
        return Baseline(
            run_id=str(summary.get("run_id") or run_id),
            rows=int(stats["lines"]),
            token_sum=int(stats.get("text_tokens", 0)) + int(stats.get("visual_tokens", 0)),
            rejected=int(stats.get("rejected", 0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


def drift_profile(samples: pd.DataFrame, baseline: Baseline | None) -> pd.DataFrame:
    """The ``drift`` profile: this run's counts, read from its ``samples`` profile, against ``baseline``."""
    ok = samples[samples["status"] == "ok"]
    return drift_frame(
        rows=int(samples["rows"].sum()),
        token_sum=int(ok["token_sum"].sum()) if len(ok) else 0,
        rejected=int(samples.loc[samples["status"] == "rejected", "rows"].sum()),
        baseline=baseline,
    )


def drift_frame(*, rows: int, token_sum: int, rejected: int, baseline: Baseline | None) -> pd.DataFrame:
    """One row comparing this run's counts with ``baseline`` (all changes null without one)."""
    import pandas as pd

    rate = rejected / rows if rows else 0.0
    # this run's row count is `run_rows`: `rows` is the catalog's, a parameter of every suite
    row: dict[str, Any] = {"run_rows": rows, "token_sum": token_sum, "reject_rate": rate}
    row |= _changes(rows, token_sum, rate, baseline)
    for name in ("rows", "token", "reject_rate"):
        change = row[f"{name}_change"]
        row[f"{name}_moved"] = None if change is None else abs(change)
    frame = pd.DataFrame([row])
    for col in ("rows_moved", "token_moved", "reject_rate_moved"):
        frame[col] = frame[col].astype("float64")
    return frame


_CHANGE_COLUMNS = (
    "previous_run",
    "previous_rows",
    "previous_token_sum",
    "previous_reject_rate",
    "rows_change",
    "token_change",
    "reject_rate_change",
)


def _changes(rows: int, token_sum: int, rate: float, baseline: Baseline | None) -> dict[str, Any]:
    """The baseline's counts and the relative changes since (row count, tokens) or the point change (rate)."""
    if baseline is None:
        return dict.fromkeys(_CHANGE_COLUMNS)

    def rel(now: int, before: int) -> float:
        return (now - before) / max(before, 1)

    return {
        "previous_run": baseline.run_id,
        "previous_rows": baseline.rows,
        "previous_token_sum": baseline.token_sum,
        "previous_reject_rate": baseline.reject_rate,
        "rows_change": rel(rows, baseline.rows),
        "token_change": rel(token_sum, baseline.token_sum),
        "reject_rate_change": rate - baseline.reject_rate,
    }
