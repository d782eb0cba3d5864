"""One wall-clock deadline per HTTP request, covering connect, TLS, the status line, the headers, redirects
and the body, enforced from outside the thread doing the request.

Why a watchdog: urllib3 and http.client bound each socket operation (``read_timeout``), not a request. A
server that sends its status line, its headers or a redirect's body one byte every few seconds never trips a
30 s socket timeout, and the thread reading it is held for as long as the server likes (minutes in the probe
of issue 36), with a per-host slot. Checking a clock between reads cannot help while http.client is inside
``readline()``. So every connection made by the client's pools is enlisted with the deadline of the request
that uses it (:func:`watched`); one daemon thread per process shuts the socket down when that deadline
passes, which wakes the blocked read at once. The request's thread then sees a dead connection, and the
client reports ``timeout`` with the deadline's words (:attr:`Watch.expired`), so the thread is free again
within a scheduling delay of the deadline: it cannot outlive its reference.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection


class Watch:
    """The deadline of one request and the connections it used (a redirect may use several)."""

    __slots__ = ("deadline", "expired", "done", "_conns", "_lock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = False
        self.done = False  # disarmed: the request ended before its deadline
        self._conns: list[Any] = []
        self._lock = threading.Lock()

    def enlist(self, conn: Any) -> None:
        with self._lock:
            self._conns.append(conn)
            expired = self.expired
        if expired:  # enlisted after the deadline (a redirect's new connection): cut it at once
            _shut(conn)

    def finish(self) -> None:
        with self._lock:
            self.done = True
            self._conns.clear()  # the pool keeps the connections; the watchdog's heap need not

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            conns = list(self._conns)
        for conn in conns:
            _shut(conn)


def _shut(conn: Any) -> None:
    """Shut the connection's sockets down (not close: another thread is blocked reading them; shutdown wakes
    it with end-of-file, close could let the descriptor be reused under it)."""
    for sock in (getattr(conn, "sock", None), getattr(conn, "_vlmforge_raw_sock", None)):
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One daemon thread for the process: sleeps until the earliest armed deadline, then expires it."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Watch]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: float) -> Watch:
        watch = Watch(deadline)
        with self._cond:
            seq = next(self._seq)
            heapq.heappush(self._heap, (deadline, seq, watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="vlmforge-request-watchdog", daemon=True
                )
                self._thread.start()
            if self._heap[0][2] is watch:
                # only a new earliest deadline shortens the watchdog's sleep; waking it for every request
                # (thousands a minute at loopback speed) cost a thread switch and the GIL each time
                self._cond.notify()
        return watch

    def disarm(self, watch: Watch) -> None:
        watch.finish()  # its heap entry is dropped when it comes up

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2].done:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, _, watch = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            if not watch.done:
                watch.expire()


WATCHDOG = _Watchdog()
_current = threading.local()


@contextlib.contextmanager
def watched(deadline: float) -> Iterator[Watch]:
    """Every pool connection this thread uses inside the block is shut down at ``deadline``."""
    watch = WATCHDOG.arm(deadline)
    previous = getattr(_current, "watch", None)
    _current.watch = watch
    try:
        yield watch
    finally:
        _current.watch = previous
        WATCHDOG.disarm(watch)


def _enlist(conn: Any) -> None:
    watch: Watch | None = getattr(_current, "watch", None)
    if watch is not None:
        watch.enlist(conn)


class WatchedHTTPConnection(HTTPConnection):
    """urllib3's connection, enlisted with the current request's watch when it connects and on every request
    (a kept-alive connection serves several requests, each with its own deadline)."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        self._vlmforge_raw_sock = sock  # TLS wraps it later: the raw socket is what a handshake reads
        _enlist(self)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _enlist(self)
        super().request(*args, **kwargs)


class WatchedHTTPSConnection(HTTPSConnection):
    """The TLS flavour of :class:`WatchedHTTPConnection`."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        self._vlmforge_raw_sock = sock
        _enlist(self)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _enlist(self)
        super().request(*args, **kwargs)
