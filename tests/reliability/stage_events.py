"""A test's end of the run's stage-event hook (``flows/runtime/faults.py``, ``VLMFORGE_TEST_WATCH_SOCKET``).

The driver of a run started with :attr:`StageEvents.env` connects to a Unix socket at each stage event
(``startup:1``, ``batches:0``, ``batches:1``, ...), sends the event and waits for one byte back. This side
records the event, runs ``on_event`` (the run is paused meanwhile, so it sees the run at exactly that point)
and answers. A thread serves the socket; it waits on ``accept``, never on a timer of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from types import TracebackType

from vlmforge.flows.runtime.faults import WATCH_ENV


class StageEvents:
    """``with StageEvents(on_event) as events:`` start runs with ``env=... | events.env``; ``events.seen``
    lists what they reported, ``events.errors`` what ``on_event`` raised."""

    def __init__(self, on_event: Callable[[str], None] | None = None) -> None:
        self.on_event = on_event
        self.seen: list[str] = []
        self.errors: list[str] = []
        self._folder = tempfile.mkdtemp(prefix="vfe-")  # short: a Unix socket path has ~100 bytes
        self.path = os.path.join(self._folder, "events.sock")
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="stage-events", daemon=True)

    @property
    def env(self) -> dict[str, str]:
        return {WATCH_ENV: self.path}

    def __enter__(self) -> StageEvents:
        self._server.bind(self.path)
        self._server.listen(8)
        self._server.settimeout(1.0)  # accept() returns at least once a second to see the stop flag
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._server.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(60)
                event = conn.makefile("rb").readline().decode().strip()
                self.seen.append(event)
                try:
                    if self.on_event is not None:
                        self.on_event(event)
                except Exception as exc:  # noqa: BLE001 - reported by the test, not lost in the thread
                    self.errors.append(f"{event}: {type(exc).__name__}: {exc}")
                finally:
                    with contextlib.suppress(OSError):  # the run ended meanwhile (a test's kill)
                        conn.sendall(b"k")
