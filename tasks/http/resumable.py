"""One URL's body as a file that survives dropped connections: after a transient error it is requested
again from the current offset (a Range request), within the client's retry budget and the batch deadline.

Tar archives are read this way, once, front to back: a connection reset at 3 GB of a 4 GB archive costs one
more request, not the archive again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO
from urllib.parse import SplitResult, urljoin, urlsplit

import urllib3

from .client import CHUNK, REDIRECTS, HttpClient, discard
from .failures import (
    HTTP_4XX,
    SOURCE_ERROR,
    TIMEOUT,
    TOO_LARGE,
    TRUNCATED,
    FetchError,
    classify_exception,
    status_error,
)
from .redirects import DEFAULT_POLICY, redirect_refusal
from .request_watch import watched
from .retry import parse_retry_after


@contextmanager
def stream(
    client: HttpClient,
    url: str,
    *,
    max_bytes: int | None = None,
    deadline: float | None = None,
    redirects: str = DEFAULT_POLICY,
) -> Iterator[BinaryIO]:
    """A readable stream of ``url``'s body that resumes with Range requests after a dropped connection.
    Reads raise FetchError; with ``deadline`` (a ``time.monotonic()`` value) a read or a retry past it raises
    ``timeout``. Each (re)opening, redirects and headers included, has the client's ``request_timeout``."""
    body = ResumingStream(
        client, url, max_bytes if max_bytes is not None else client.options.max_bytes, deadline
    )
    body.redirects = redirects
    try:
        yield body  # type: ignore[misc]
    finally:
        body.close()


class ResumingStream:
    """File-like body of one URL, re-requested from the current offset (Range) after a transient error."""

    def __init__(self, client: HttpClient, url: str, cap: int, deadline: float | None = None) -> None:
        self.client, self.url, self.cap, self.deadline = client, url, cap, deadline
        self.pos = 0
        self.size: int | None = None
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._broken = False  # the connection failed after a partial read: reopen before reading again
        self._attempt = 0
        self.redirects = DEFAULT_POLICY
        self._origin = urlsplit(url)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while True:
            if self._resp is None:
                if self.size is not None and self.pos >= self.size:
                    return b""
                self._resp = self._open()
            try:
                data = self._read_some(self._resp, n)
            except Exception as exc:  # noqa: BLE001
                self._give_up_or_resume(classify_exception(exc, self.url, reading_body=True))
                continue  # resume from self.pos
            self.client.count_received(len(data))
            if self._broken and self._resp is not None:
                self._broken = False
                self._drop()
            if not data and n != 0:
                if self.size is not None and self.pos < self.size:  # short body without an exception
                    self._drop()
                    if self._attempt > self.client.options.retries:
                        raise FetchError(TRUNCATED, f"got {self.pos} of {self.size} bytes", url=self.url)
                    continue
                return b""
            self.pos += len(data)
            if self.pos > self.cap:
                raise FetchError(TOO_LARGE, f"body exceeds the cap of {self.cap} bytes", url=self.url)
            return bytes(data)

    def close(self) -> None:
        if self._resp is not None:
            discard(self._resp)
            self._resp.release_conn()
            self._resp = None

    # ----------------------------------------------------------------------------------------- internals

    def _drop(self) -> None:
        if self._resp is not None:
            discard(self._resp)
        self._resp = None

    def _give_up_or_resume(self, err: FetchError) -> None:
        """Raise ``err`` unless the read may resume: a transient failure within the retry budget, before the
        batch deadline."""
        self._drop()
        if err.failure == TIMEOUT and self.deadline is not None and time.monotonic() >= self.deadline:
            raise err from None  # the batch deadline: no resume
        if not err.transient or self._attempt > self.client.options.retries:
            raise err from None

    def _open(self) -> urllib3.BaseHTTPResponse:
        # self._attempt counts on across reopenings: read() stops resuming once it passes the retries.
        return self.client.retry.run(
            self._open_once,
            self.deadline,
            attempts_before=self._attempt,
            cap_retry_after=True,  # as get(): a server asking for an hour's pause is left for a later run
            deadline_note=" (not retried: the batch deadline comes first)",
        )

    def _open_once(self, attempt: int) -> urllib3.BaseHTTPResponse:
        self._attempt = attempt
        self._check_deadline()
        # The body of a stream may take hours (the batch deadline bounds it); getting to its first byte,
        # redirects included, has the per-request deadline.
        opened = time.monotonic() + self.client.options.request_timeout
        if self.deadline is not None:
            opened = min(opened, self.deadline)
        for _ in range(self.client.options.max_redirects + 1):
            parts = urlsplit(self.url)
            with self.client.hosts.attempt(parts.hostname or "", self.deadline), watched(opened) as watch:
                try:
                    r = self._request(parts)
                except FetchError as err:
                    if watch.expired and err.failure != TIMEOUT:
                        raise FetchError(TIMEOUT, "no answer by the request deadline", url=self.url) from None
                    raise
            if isinstance(r, str):
                target = urljoin(self.url, r)
                refusal = redirect_refusal(
                    self._origin, parts, urlsplit(target), self.redirects, self.client.options.resolver
                )
                if refusal:
                    raise FetchError(SOURCE_ERROR, refusal, url=self.url)
                self.url = target
                continue
            if watch.expired:  # the answer arrived as the deadline passed: its connection is shut
                discard(r)
                raise FetchError(TIMEOUT, "no answer by the request deadline", url=self.url)
            return r
        raise FetchError(HTTP_4XX, "too many redirects", url=self.url)

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise FetchError(TIMEOUT, f"batch deadline reached at byte {self.pos}", url=self.url)

    def _request(self, parts: SplitResult) -> urllib3.BaseHTTPResponse | str:
        """One request from ``self.pos``: the response, or the Location of a redirect."""
        opts = self.client.options
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(SOURCE_ERROR, f"not an http(s) URL: {self.url}", url=self.url)
        timeout = urllib3.Timeout(connect=opts.connect_timeout, read=opts.read_timeout)
        r = self.client.open(parts, f"bytes={self.pos}-" if self.pos else None, timeout, self.url)
        if r.status in REDIRECTS and r.headers.get("location"):
            discard(r)  # a redirect's body is never read
            r.release_conn()
            return str(r.headers["location"])
        if r.status == 416 and self.pos:
            discard(r)
            raise FetchError(TRUNCATED, f"the server has no bytes past {self.pos} (shorter than announced)")
        if r.status >= 400:
            discard(r)
            raise status_error(
                r.status, r.reason or "", self.url, parse_retry_after(r.headers.get("retry-after"))
            )
        if self.pos and r.status != 206:
            discard(r)
            raise FetchError(TRUNCATED, f"connection dropped at byte {self.pos} and the server cannot resume")
        length = r.headers.get("content-length")
        if length and length.isdigit():
            self.size = self.pos + int(length)
            if self.size > self.cap:
                discard(r)
                raise FetchError(TOO_LARGE, f"{self.size} bytes exceed the cap of {self.cap}", url=self.url)
        return r

    def _read_some(self, resp: urllib3.BaseHTTPResponse, n: int) -> bytes:
        """Up to ``n`` bytes (all when ``n < 0``), short only at the end of the body: one socket read at a
        time, so the deadline is checked however slowly the body drips in."""
        parts: list[bytes] = []
        got = 0
        while n < 0 or got < n:
            self._check_deadline()
            try:
                piece = resp.read1(CHUNK if n < 0 else min(CHUNK, n - got), decode_content=False)
            except Exception:
                if not parts:
                    raise
                self._broken = True  # hand over what arrived; the next read resumes from there
                break
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)
