"""Test-only hooks on the run's own stage events: exact crash points and exact watch points.

The flow reports its stages to :mod:`flows.runtime.progress`: declaring a stage is event 0 of it, each unit
done moves it on (``batches:1``, ``batches:2``, ...), and start-up milestones are events of the stage
``startup`` (``startup:1`` the Prefect API answers, ``startup:2`` Ray is up). Two environment variables, read
(and removed from the environment) when the driver first imports this module, turn those events into hooks for
the reliability tests; outside tests neither is set, and ``progress`` does not call in here at all (``ACTIVE``
is False).

- ``VLMFORGE_TEST_KILL_AT=<stage>:<n>``: at that event, write ``vlmforge-test-kill <stage>:<n>`` to stderr,
  then SIGKILL every process this one started (children of children included), every other process of its
  session when it leads one (the fault tests start runs with a session of their own, which the Ray
  processes share), and itself: a crash at an exact point, however loaded the machine
  (tests/reliability/test_faults.py).
- ``VLMFORGE_TEST_WATCH_SOCKET=<path>``: at every event, send ``<stage>:<n>`` and a newline to the Unix socket
  at ``path`` and wait for one byte back, so a test inspects the run at that exact point while it is paused
  (tests/reliability/test_listeners.py).

Never set these on a real run: the first kills it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from collections import Counter

KILL_ENV = "VLMFORGE_TEST_KILL_AT"
WATCH_ENV = "VLMFORGE_TEST_WATCH_SOCKET"
KILL_MARK = "vlmforge-test-kill"


def _parse_point(text: str | None) -> tuple[str, int] | None:
    if not text:
        return None
    stage, _, n = text.rpartition(":")
    if not stage or not n.isdigit():
        raise ValueError(f"{KILL_ENV} must be <stage>:<n>, got {text!r}")
    return stage, int(n)


# Taken out of the environment: the hooks belong to the run's driver, not to the Ray workers or the Prefect
# server it starts afterwards (they inherit its environment, and Prefect enters the task runner in workers).
_KILL_AT = _parse_point(os.environ.pop(KILL_ENV, None))
_WATCH = os.environ.pop(WATCH_ENV, None) or None
ACTIVE = _KILL_AT is not None or _WATCH is not None
_counts: Counter[str] = Counter()


def at(stage: str, advance: int) -> None:
    """Stage ``stage`` was declared (``advance`` 0) or moved on by ``advance`` units: run the hooks."""
    if not ACTIVE:
        return
    before = _counts[stage]
    _counts[stage] += advance
    now = _counts[stage]
    if _WATCH is not None:
        _report(_WATCH, f"{stage}:{now}")
    if _KILL_AT is not None and _KILL_AT[0] == stage and (before < _KILL_AT[1] <= now or _KILL_AT[1] == now):
        _kill_everything(f"{stage}:{_KILL_AT[1]}")


def _report(path: str, point: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(point.encode() + b"\n")
        sock.recv(1)


def _kill_everything(point: str) -> None:
    import psutil

    os.write(2, f"\n{KILL_MARK} {point}\n".encode())
    me = os.getpid()
    victims = {p.pid for p in psutil.Process(me).children(recursive=True)}
    if os.getsid(0) == me:  # the session is this run's own: take every process of it
        for pid in psutil.pids():
            with contextlib.suppress(OSError):
                if os.getsid(pid) == me:
                    victims.add(pid)
    victims.discard(me)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)
