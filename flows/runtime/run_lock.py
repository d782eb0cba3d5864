"""One run at a time per output folder: ``OUT/.vlmforge-run.lock``.

Two runs into one folder raced with no lock and no warning. A run now holds an exclusive ``flock`` on
``OUT/.vlmforge-run.lock`` for its whole life and writes who it is there (pid, host, start time, command).
A second run refuses at once, naming the first, or waits for it (``--wait-lock``). The kernel releases a
``flock`` when its process dies, however it dies, so the lock of a killed run is taken over by the next one
without anyone deleting a file; the file's text (the dead holder) is only reported.

The lock file is removed on release. A run that opened the file before it was removed would lock a name
that no longer exists, so a lock counts only once the locked file is still the one under the name (the
classic check of the inode after ``flock``). Output folders that are URLs (``s3://``) take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...tasks.errors import UsageError

LOCK_NAME = ".vlmforge-run.lock"


class OutputBusy(UsageError):
    """Another run holds the output folder (its lock text in ``holder``): one line, exit 2."""

    def __init__(self, out: str, holder: dict[str, Any]) -> None:
        super().__init__(
            f"--out {out} is in use by another vlmforge run ({describe(holder)})",
            "wait for it to end, or add --wait-lock to start when it does",
        )
        self.holder = holder


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host, started 2026-12-05 09:01:02 UTC: vlmforge run ...`` from a lock's text."""
    if not holder:
        return "no details recorded"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    where = f" on {holder['host']}" if holder.get("host") not in (None, socket.gethostname()) else ""
    return f"pid {holder.get('pid')}{where}, started {started}: {holder.get('command', '?')}"


def read_holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def run_lock(
    out: str, wait: bool = False, say: Callable[[str], None] = lambda _: None
) -> Iterator[Path | None]:
    """Hold the output folder ``out`` for the block (None for a URL: no lock). Raises :class:`OutputBusy`
    when another run holds it, unless ``wait``: then ``say`` tells whom it waits for, and it waits."""
    if "://" in out:
        yield None
        return
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = _acquire(path, out, wait, say)
    try:
        stale = read_holder(path)
        if stale and stale.get("pid") != os.getpid():
            say(f"lock: took over the lock of a run that is gone ({describe(stale)})")
        _write_holder(fd)
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


def _acquire(path: Path, out: str, wait: bool, say: Callable[[str], None]) -> int:
    told = False
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(path)
            if not wait:
                os.close(fd)
                raise OutputBusy(out, holder) from None
            if not told:
                say(f"waiting for the run that holds {out} ({describe(holder)})")
                told = True
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until that run ends
        if _still_named(fd, path):
            return fd
        os.close(fd)  # the holder removed the file we locked: lock the one under the name now


def _still_named(fd: int, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _write_holder(fd: int) -> None:
    me = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "command": " ".join(["vlmforge", *sys.argv[1:]]),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
