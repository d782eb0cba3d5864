"""The run's progress reports: the flow calls these, a view (``flows/runtime/progress_view.py``) shows them.

The flow declares the subsets and stage totals and reports each unit done; ``vlmforge run`` shows them live
on a terminal or as plain lines when its stderr is piped (:func:`terminal_progress`). Without an active view
(a deployment run by a worker, tests, a flow called from Python) every call only counts, so the flow never
depends on a terminal. Prefect's own logs and the UI stay the record; this is for the person watching.

The same calls are the run's stage events for the test-only hooks of :mod:`flows.runtime.faults` (exact kill
and watch points); without those hooks set, that costs one boolean test per call.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO

from rich.console import Console

from . import faults
from .progress_view import LineView, LiveView, ProgressView, RunProgress, SubsetProgress

_view: ProgressView | None = None
_run = RunProgress()


@contextlib.contextmanager
def terminal_progress(
    enabled: bool | None = None, live: bool | None = None, stream: IO[str] | None = None
) -> Iterator[RunProgress]:
    """Show the run's progress on ``stream`` (stderr) while the block runs: live on a terminal, plain
    lines otherwise (``live``); ``enabled=False`` shows nothing. Yields the counts."""
    global _view
    if enabled is False or _view is not None:
        yield _run
        return
    out = stream or sys.stderr
    if live if live is not None else out.isatty():
        view: ProgressView = LiveView(_run, Console(file=out))
    else:
        view = LineView(_run, out)
    _view = view
    try:
        with view:
            yield _run
    finally:
        _view = None


def subsets(plan: Iterable[tuple[str, int, int]]) -> None:
    """Declare the subsets of the batch stage: (name, batches, rows) each."""
    _run.subsets = {name: SubsetProgress(batches, rows) for name, batches, rows in plan}
    _run.started = time.monotonic()
    _run.rows_done = _run.rows_worked = _run.images_worked = 0  # a process may run one flow after another


def stage(name: str, total: int) -> None:
    """Declare stage ``name`` with ``total`` units of work (it starts)."""
    if faults.ACTIVE:
        faults.at(name, 0)
    if _view is not None:
        _view.stage_started(name, total)


def subset_stage(subset: str, name: str) -> None:
    """Subset ``subset`` entered stage ``name``."""
    s = _run.subsets.get(subset)
    if s is None:
        return
    s.stage = name
    if _view is not None:
        _view.subset_stage(subset)


def advance(name: str, n: int = 1, subset: str | None = None) -> None:
    """Mark ``n`` more units of stage ``name`` done (of ``subset``, when given; batches report through
    :func:`batch_finished`, which has their counts)."""
    if faults.ACTIVE:
        faults.at(name, n)
    if subset is not None and name != "batches":
        subset_stage(subset, f"{name} done")


def batch_finished(subset: str, rows: int, images: int, skipped: bool) -> None:
    """A batch of ``subset`` finished with ``rows`` rows and ``images`` images (0 for a failed batch); a
    batch that a rerun skipped is done, not worked, and does not count in the rates."""
    _run.rows_done += rows
    if not skipped:
        _run.rows_worked += rows
        _run.images_worked += images
    s = _run.subsets.get(subset)
    if s is None:
        return
    s.done += 1
    s.stage = "batches done" if s.done >= s.batches else "batches"
    if _view is not None:
        _view.batch_done(subset)


def milestone(name: str) -> None:
    """A step of a stage that has no bar (``startup``: the Prefect API answers, Ray is up)."""
    if faults.ACTIVE:
        faults.at(name, 1)
