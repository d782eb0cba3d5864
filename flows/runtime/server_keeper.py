"""A run's Prefect server, kept alive exactly as long as some process uses it.

``python -m vlmforge.flows.runtime.server_keeper HOME PORT`` runs ``prefect server start`` on 127.0.0.1:PORT
with its database in HOME, and watches HOME's holders (:func:`flows.runtime.prefect_home.live_holders`): the
run that started it, and every run of the same project that found it recorded and reported to it. When the
last holder has ended, however it ended (its own exit, a second Ctrl-C, SIGKILL), the keeper stops the server
and exits. A run's server used to be a plain child in a session of its own: a driver that died without
stopping it left it serving for as long as the machine ran.

The server dies with the keeper as well (``PR_SET_PDEATHSIG``): SIGKILL of the keeper leaves nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .prefect_home import forget_server, home_lock, live_holders

PR_SET_PDEATHSIG = 1
POLL_S = 0.2
STOP_GRACE_S = 5.0


def server_command(port: int) -> list[str]:
    """``prefect server start`` bound to loopback."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]


def die_with_parent() -> None:
    """In a child before exec (Linux): SIGKILL it when the process that started it dies."""
    name = ctypes.util.find_library("c")
    if name and sys.platform.startswith("linux"):
        ctypes.CDLL(name, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def keep(home: Path, port: int) -> int:
    """Serve ``home`` on ``port`` while it has holders; returns the exit code."""

    def stop_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the run's to handle
    server = subprocess.Popen(server_command(port), preexec_fn=die_with_parent)
    try:
        while server.poll() is None:
            time.sleep(POLL_S)
            if live_holders(home):
                continue
            with home_lock(home):  # a run attaching now either sees the record gone or is a holder
                if live_holders(home):
                    continue
                forget_server(home, os.getpid())
            break
    finally:
        with home_lock(home):
            forget_server(home, os.getpid())
        _stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1]), int(sys.argv[2])))
