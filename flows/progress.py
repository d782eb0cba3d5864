"""A live per-stage progress display for ``vlmforge run`` in a terminal (rich).

The flow reports stage totals and completions here; without an active display (a deployment run by a worker,
tests, output piped to a file) every call is a no-op, so the flow never depends on a terminal. Prefect's own
logs and the UI stay the record; this is for the person watching the command.

The same calls are the run's stage events for the test-only hooks of :mod:`flows.faults` (exact kill and
watch points); without those hooks set, that costs one boolean test per call.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from . import faults

_display: Progress | None = None
_tasks: dict[str, TaskID] = {}


@contextlib.contextmanager
def terminal_progress(enabled: bool | None = None) -> Iterator[None]:
    """Show stage progress on stderr while the block runs (default: only when stderr is a terminal)."""
    global _display
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled or _display is not None:
        yield
        return
    display = Progress(
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    _display = display
    try:
        with display:
            yield
    finally:
        _display = None
        _tasks.clear()


def stage(name: str, total: int) -> None:
    """Declare (or resize) stage ``name`` with ``total`` units of work."""
    if faults.ACTIVE:
        faults.at(name, 0)
    if _display is None:
        return
    if name in _tasks:
        _display.update(_tasks[name], total=total)
    else:
        _tasks[name] = _display.add_task(name, total=total)


def advance(name: str, n: int = 1) -> None:
    """Mark ``n`` more units of stage ``name`` done."""
    if faults.ACTIVE:
        faults.at(name, n)
    if _display is not None and name in _tasks:
        _display.advance(_tasks[name], n)


def milestone(name: str) -> None:
    """A step of a stage that has no bar (``startup``: the Prefect API answers, Ray is up)."""
    if faults.ACTIVE:
        faults.at(name, 1)
