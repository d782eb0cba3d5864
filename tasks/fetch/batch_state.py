"""What the sources of one fetch batch share: the thread pool, the batch deadline (:meth:`BatchRun.wait`),
the bytes transferred, the host limits a source asks for, the store writer, and the announcement of each ok
answer as soon as it is final (:class:`~.acquire.FetchStream` hands it to the media stage at once).

The driver that tries the recipe's sources in order is :func:`~.acquire.fetch_batch`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar
from urllib.parse import urlsplit

from ..http import TIMEOUT, FetchError, HttpClient
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome
from .store_writes import StoreWriter

_T = TypeVar("_T")
DEADLINE_GRACE = 2.0  # seconds a batch waits past its deadline for threads finishing a socket read


class BatchRun:
    """The state of one :func:`~.acquire.fetch_batch` call."""

    def __init__(
        self,
        writer: StoreWriter,
        context: FetchContext,
        client: HttpClient,
        options: FetchKnobs,
        pool: ThreadPoolExecutor,
        on_ready: Callable[[FetchOutcome], None] | None = None,
    ) -> None:
        self.writer, self.context, self.client = writer, context, client
        self.options, self.pool, self.on_ready = options, pool, on_ready
        timeout = options.batch_timeout
        self.deadline: float | None = None if timeout is None else time.monotonic() + timeout
        self.timed_out = False  # a future was abandoned at the deadline (its thread is not waited for)
        self.bytes_fetched = 0
        self._announced: set[str] = set()
        self._lock = threading.Lock()

    def ready(self, outcome: FetchOutcome) -> None:
        """Announce an ok outcome to ``on_ready`` once, as soon as it is final (from any thread): an ok
        answer from a source ends the search for that reference."""
        if self.on_ready is None or not outcome.ok:
            return
        with self._lock:
            if outcome.ref in self._announced:
                return
            self._announced.add(outcome.ref)
        self.on_ready(outcome)

    def wait(self, fut: Future[_T]) -> _T:
        """``fut.result()``, bounded by the batch deadline (plus a short grace for threads that are
        finishing their last socket read); raises FetchError(timeout) past it."""
        if self.deadline is None:
            return fut.result()
        try:
            return fut.result(timeout=max(0.0, self.deadline - time.monotonic()) + DEADLINE_GRACE)
        except FutureTimeout:
            self.timed_out = True
            fut.cancel()
            raise FetchError(
                TIMEOUT, f"batch deadline of {self.options.batch_timeout:g} s reached while fetching"
            ) from None

    def count_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_fetched += n

    def limit_host(self, url: str, max_concurrency: int | None) -> None:
        """Apply a source's ``max_concurrency`` (this batch's share of it) to the host of ``url``."""
        host = urlsplit(url).hostname
        if max_concurrency and host:
            self.client.hosts.set_limit(host, self.options.host_limit(max_concurrency))
