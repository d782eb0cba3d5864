"""The retry policy of every transfer: transient failures are retried with exponential backoff and full
jitter, a server's ``Retry-After`` (seconds or an HTTP date) replaces the backoff, and nothing sleeps past a
batch deadline.

One policy serves HTTP GETs, resumed tar streams and object-store reads (:func:`retry_call`), so a reference
costs the same number of attempts whichever source it comes from.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ...schemas.redact import redact
from .failures import TIMEOUT, FetchError

log = logging.getLogger("vlmforge.fetch")
_T = TypeVar("_T")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), None when absent/invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RetryPolicy:
    """Attempts, backoff and Retry-After handling of one client (thread-safe: the jitter RNG is only
    read)."""

    def __init__(
        self,
        retries: int,
        backoff_base: float,
        backoff_max: float,
        retry_after_max: float,
        seed: int | None = None,
    ) -> None:
        self.retries, self.backoff_base, self.backoff_max = retries, backoff_base, backoff_max
        self.retry_after_max = retry_after_max
        self._rng = random.Random(seed)

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Delay before attempt ``attempt + 1``: Retry-After when given, else full jitter."""
        if retry_after is not None:
            return retry_after + self._rng.uniform(0, min(1.0, 0.1 * retry_after))
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        return self._rng.uniform(0, ceiling)

    def run(
        self,
        attempt_once: Callable[[int], _T],
        deadline: float | None,
        *,
        attempts_before: int = 0,
        cap_retry_after: bool = False,
        deadline_note: str | None = None,
        log_url: str | None = None,
    ) -> _T:
        """Call ``attempt_once(n)`` for n = ``attempts_before`` + 1, + 2... until it returns.

        A transient FetchError is retried after :meth:`backoff`, at most ``retries`` times in all; the error
        that ends the loop is raised with its ``attempts`` set. No backoff sleeps past ``deadline`` (a
        ``time.monotonic()`` value): such an error is raised with ``deadline_note`` (default: "not retried:
        the batch deadline comes before attempt N") added to its detail. With ``cap_retry_after`` a
        Retry-After over ``retry_after_max`` is not waited for; with ``log_url`` each retry is logged at
        DEBUG level."""
        attempt = attempts_before
        while True:
            attempt += 1
            try:
                return attempt_once(attempt)
            except FetchError as err:
                err.attempts = attempt
                if not err.transient or attempt > self.retries:
                    raise
                if cap_retry_after and err.retry_after is not None and err.retry_after > self.retry_after_max:
                    err.detail += (
                        f" (Retry-After {err.retry_after:.0f} s exceeds the cap; left for a later run)"
                    )
                    raise
                delay = self.backoff(attempt, err.retry_after)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    next_one = f" (not retried: the batch deadline comes before attempt {attempt + 1})"
                    err.detail += next_one if deadline_note is None else deadline_note
                    raise
                if log_url is not None:
                    log.debug("retry %d of %s in %.2f s after %s", attempt, redact(log_url), delay, err)
                time.sleep(delay)


def retry_call(
    fn: Callable[[], Any],
    classify: Callable[[BaseException], FetchError],
    policy: RetryPolicy,
    deadline: float | None = None,
) -> tuple[Any, int]:
    """Run ``fn`` with ``policy`` (object stores); returns (result, attempts). With ``deadline`` (a
    ``time.monotonic()`` value) no attempt starts and no backoff sleeps past it."""

    def attempt_once(attempt: int) -> tuple[Any, int]:
        try:
            if deadline is not None and time.monotonic() >= deadline:
                raise FetchError(TIMEOUT, f"batch deadline reached before attempt {attempt}")
            return fn(), attempt
        except Exception as exc:  # noqa: BLE001
            raise classify(exc) from None

    return policy.run(attempt_once, deadline)
