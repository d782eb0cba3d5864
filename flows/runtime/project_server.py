"""The Prefect API of a run that was given none: the project's server, or one of the run's own.

:func:`hold_project_server` returns at once with the URL of the server serving the project's Prefect home
(:mod:`.prefect_home`): the one recorded there (``vlmforge server``, or another run's), or a new one, started
through :mod:`.server_keeper` on a free loopback port and recorded for the next run. Either way this
process is one of its holders until :meth:`HeldServer.release` (or its death): a run's server stops when
its last holder has gone, a ``vlmforge server`` keeps running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import own_processes
from .prefect_home import (
    ServerRecord,
    add_holder,
    home_lock,
    live_holders,
    prefect_home,
    record_server,
    recorded_server,
    save_template,
    seed_from_template,
    server_env,
)

LOOPBACK = "127.0.0.1"
SERVER_LOG = "server.log"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


@dataclass
class HeldServer:
    """The Prefect server this run reports to, held (see the module's doc)."""

    url: str
    home: Path
    holder: Path  # this process's file among the home's holders
    keeper: subprocess.Popen[bytes] | None  # the server's keeper when this run started it
    fresh: bool  # the home had no database: once healthy, its migrated database becomes the template
    kind: str  # "run" or "server" (a `vlmforge server` of the project)

    @property
    def started_here(self) -> bool:
        return self.keeper is not None

    def wait_healthy(self, timeout_s: float) -> None:
        """Return once ``/health`` answers; raise with the log's tail if the server ends or times out."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    break
            except OSError:
                ended = self.keeper is not None and self.keeper.poll() is not None
                if ended or time.monotonic() > deadline:
                    log = self.home / SERVER_LOG
                    tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
                    raise RuntimeError(f"Prefect server did not start at {self.url}:\n{tail}") from None
                time.sleep(0.25)
        if self.fresh:
            save_template(self.home)

    def release(self, wait_s: float = 30.0) -> None:
        """No longer a holder; a server this run started and nobody else holds is stopped before return."""
        own_processes.forget_release(self.abandon)
        with contextlib.suppress(OSError):
            self.holder.unlink()
        if self.keeper is None:
            return
        if live_holders(self.home):  # another run of the project reports to it: it keeps serving
            return
        self.keeper.terminate()
        try:
            self.keeper.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.keeper.pid, signal.SIGKILL)

    def abandon(self) -> None:
        """At once, for a process about to exit without cleaning up: let go of the server, and kill it when
        this run started it and holds it alone."""
        with contextlib.suppress(OSError):
            self.holder.unlink()
        if self.keeper is not None and not live_holders(self.home):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.keeper.pid, signal.SIGKILL)


def hold_project_server() -> HeldServer:
    """The project's server, held by this process (started, without waiting for it, if none serves)."""
    home = prefect_home()
    with home_lock(home):
        record = recorded_server(home)
        holder = add_holder(home, os.getpid())
        if record is not None:
            held = HeldServer(record.url, home, holder, None, False, record.kind)
        else:
            fresh = seed_from_template(home)
            port = free_port()
            cmd = [sys.executable, "-m", "vlmforge.flows.runtime.server_keeper", str(home), str(port)]
            with open(home / SERVER_LOG, "wb") as log:
                # a process group of its own: the terminal's Ctrl-C reaches the run's driver only, which
                # stops the run, then lets go of this server (it used to die first, leaving the run unable
                # to report)
                keeper = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, env=server_env(home), process_group=0
                )
            url = f"http://{LOOPBACK}:{port}/api"
            record_server(home, ServerRecord(url, keeper.pid, "run"))
            held = HeldServer(url, home, holder, keeper, fresh, "run")
    own_processes.on_abandon(held.abandon, spare=None if held.keeper is None else held.keeper.pid)
    return held
