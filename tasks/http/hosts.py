"""Politeness per host: a limit on requests in flight, a pause that a 429/503 ``Retry-After`` puts on the
whole host, and a circuit breaker that stops trying a host after too many consecutive transient failures.

A reference that waits for a host's pause and would wait past the batch deadline is not sent: it ends with
the class of the answer that paused the host (``http_429`` or ``http_5xx``, retried by a later run), not as
a ``timeout`` of its own; it never counts towards the host's circuit breaker.

Every transfer (HTTP requests, resumed tar streams, s3:// and hf:// object reads) takes one of its host's
slots for the duration of an attempt and reports how the attempt ended, so the limits hold for a worker
process whatever mix of sources its batches read. The state is shared by every thread of the process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .failures import CIRCUIT_OPEN, HOST_FAILURES, HTTP_5XX, HTTP_429, TIMEOUT, FetchError

log = logging.getLogger("vlmforge.fetch")


@dataclass
class HostState:
    slots: threading.BoundedSemaphore
    limit: int
    pause_until: float = 0.0
    pause_failure: str = HTTP_429  # the class of the answer whose Retry-After set ``pause_until``
    failures: int = 0
    open_until: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class HostTable:
    """The per-host state of one client (thread-safe)."""

    def __init__(self, per_host: int, breaker_failures: int, breaker_cooldown: float) -> None:
        self.per_host = per_host
        self.breaker_failures, self.breaker_cooldown = breaker_failures, breaker_cooldown
        self._hosts: dict[str, HostState] = {}
        self._limits: dict[str, int] = {}
        self._lock = threading.Lock()

    def set_limit(self, host: str, limit: int) -> None:
        """Lower (or raise) the in-flight limit of one host, e.g. from a recipe's ``max_concurrency``."""
        key = host.lower()
        with self._lock:
            self._limits[key] = limit
            state = self._hosts.get(key)
            if state is not None and state.limit != limit:
                self._hosts[key] = HostState(threading.BoundedSemaphore(limit), limit)

    def limit(self, host: str) -> int:
        """Requests in flight allowed to ``host`` (also the size of its keep-alive pool)."""
        with self._lock:
            return self._limits.get(host.lower(), self.per_host)

    def _state(self, host: str) -> HostState:
        key = host.lower()
        with self._lock:
            state = self._hosts.get(key)
            if state is None:
                limit = self._limits.get(key, self.per_host)
                state = self._hosts[key] = HostState(threading.BoundedSemaphore(limit), limit)
            return state

    @contextmanager
    def slot(self, host: str, deadline: float | None = None) -> Iterator[HostState]:
        """One of ``host``'s in-flight slots, after any pause its Retry-After asked for. With ``deadline``
        (``time.monotonic()`` value) waiting for a slot or a pause past it fails as ``timeout``."""
        state = self._state(host)
        now = time.monotonic()
        if state.open_until > now:
            raise FetchError(
                CIRCUIT_OPEN,
                f"{host}: {state.failures} consecutive failures; circuit open for "
                f"{state.open_until - now:.0f} s more",
            )
        if deadline is None:
            state.slots.acquire()
        elif not state.slots.acquire(timeout=max(0.0, deadline - now)):
            raise FetchError(TIMEOUT, f"{host}: no free connection slot before the batch deadline")
        try:
            _wait_for_pause(state, host, deadline)
            yield state
        finally:
            state.slots.release()

    def record(self, state: HostState, err: FetchError | None, host: str) -> None:
        """How one attempt on ``host`` ended: a success closes the breaker, a Retry-After pauses the host,
        a transient failure counts towards opening the breaker."""
        with state.lock:
            if err is None:
                state.failures = 0
                state.open_until = 0.0
                return
            if err.retry_after is not None and err.failure in (HTTP_429, HTTP_5XX):
                until = time.monotonic() + err.retry_after
                if until > state.pause_until:
                    state.pause_until, state.pause_failure = until, err.failure
            if err.failure in HOST_FAILURES:
                state.failures += 1
                if state.failures >= self.breaker_failures:
                    state.open_until = time.monotonic() + self.breaker_cooldown
                    log.warning(
                        "circuit open for %s after %d consecutive failures (last: %s)",
                        host,
                        state.failures,
                        err,
                    )

    @contextmanager
    def attempt(self, host: str, deadline: float | None = None) -> Iterator[HostState]:
        """:meth:`slot` that also records the attempt's end: a FetchError raised inside counts as the
        host's failure (and is re-raised), a normal exit as its success."""
        with self.slot(host, deadline) as state:
            try:
                yield state
            except FetchError as err:
                self.record(state, err, host)
                raise
            self.record(state, None, host)


def _wait_for_pause(state: HostState, host: str, deadline: float | None) -> None:
    """Sleep while a 429/503 Retry-After pauses the whole host (not just one request). A pause that lasts
    past ``deadline`` fails the waiting reference with the host's own answer (``http_429`` / ``http_5xx``,
    its ``retry_after`` the time left), not sent and not a timeout."""
    while True:
        wait = state.pause_until - time.monotonic()
        if wait <= 0:
            return
        if deadline is not None and time.monotonic() + wait > deadline:
            raise FetchError(
                state.pause_failure,
                f"not sent: {host} asked every request to wait {wait:.0f} s (Retry-After), past the batch "
                "deadline",
                retry_after=wait,
            )
        time.sleep(min(wait, 1.0))
