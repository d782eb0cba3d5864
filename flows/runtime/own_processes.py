"""What a driver that exits at once (a second Ctrl-C) must take down with it: the services it started.

A run's services do not take the terminal's Ctrl-C (the Prefect server's keeper runs in a process group of
its own, Ray's processes block SIGINT), so a driver that ``os._exit``-ed on a second Ctrl-C left them: its
Prefect server serving for minutes, Ray's agents for ~90 s. :func:`abandon_all`, called there, first runs
what the services registered (:func:`on_abandon`: the Prefect server's holder lets go of it), then SIGKILLs
every process below this one, except the processes registered as spared (a Prefect server that another run
of the project still reports to; its keeper stops it when its last holder is gone).

Nothing here imports the runtime: :mod:`.interrupt` reaches it from a signal handler.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

_abandon: list[tuple[Callable[[], None], int | None]] = []


def on_abandon(release: Callable[[], None], spare: int | None = None) -> None:
    """Run ``release`` when this process exits at once; spare process ``spare`` and its children from
    the kill (``release`` decides about them)."""
    _abandon.append((release, spare))


def forget_release(release: Callable[[], None]) -> None:
    """``release`` ran the ordinary way: not again."""
    _abandon[:] = [(r, s) for r, s in _abandon if r != release]


def abandon_all() -> list[int]:
    """Run the registered releases, then SIGKILL every process below this one but the spared; returns
    the pids killed."""
    spared = {s for _, s in _abandon if s is not None}
    for release, _ in reversed(_abandon):
        with contextlib.suppress(Exception):
            release()
    _abandon.clear()
    return kill_descendants(spared)


def kill_descendants(spared: set[int]) -> list[int]:
    """SIGKILL the processes below this one, leaving ``spared`` and theirs; twice, for children a dying
    parent was starting."""
    import psutil

    killed: list[int] = []
    for _ in range(2):
        try:
            below = psutil.Process().children(recursive=True)
        except psutil.Error:
            return killed
        keep: set[int] = set()
        for pid in spared:
            with contextlib.suppress(psutil.Error):
                keep |= {pid} | {p.pid for p in psutil.Process(pid).children(recursive=True)}
        for proc in below:
            if proc.pid not in keep:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(proc.pid, signal.SIGKILL)
                    killed.append(proc.pid)
    return killed
