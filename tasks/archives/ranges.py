"""Random access to one file, local or remote: the zip reader asks for byte ranges through this, whether
the archive sits behind an HTTP server (Range requests, with the client's politeness and retries) or on any
fsspec filesystem (local, s3://, hf://)."""

from __future__ import annotations

import threading
from typing import Protocol

from fsspec import AbstractFileSystem

from ...schemas.redact import redact
from ..http import BAD_ARCHIVE, TRUNCATED, FetchError, HttpClient


class RangeSource(Protocol):
    """Random access to one remote or local file."""

    label: str
    bytes_read: int

    def tail(self, n: int) -> tuple[int, bytes]:
        """(file size, last ``n`` bytes) in one request."""
        ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` inclusive."""
        ...


class HttpRangeSource:
    """A file behind an HTTP server that honours Range (the client's politeness and retries apply)."""

    def __init__(
        self, client: HttpClient, url: str, deadline: float | None = None, redirects: str = "same_host"
    ) -> None:
        self.client, self.url, self.label = client, url, redact(url)
        self.redirects = redirects  # the source's redirect policy (redirects.py)
        self.deadline = deadline  # time.monotonic() value bounding every request (a batch's deadline)
        self.bytes_read = 0
        self._lock = threading.Lock()

    def tail(self, n: int) -> tuple[int, bytes]:
        resp = self.client.get(
            self.url, suffix=n, max_bytes=n, deadline=self.deadline, redirects=self.redirects
        )
        self._count(resp.nbytes)
        if resp.total_size is None:
            raise FetchError(BAD_ARCHIVE, "server sent no Content-Range total", url=self.url)
        return resp.total_size, resp.body

    def read(self, start: int, end: int) -> bytes:
        resp = self.client.get(
            self.url,
            byte_range=(start, end),
            max_bytes=end - start + 1,
            deadline=self.deadline,
            redirects=self.redirects,
        )
        self._count(resp.nbytes)
        return resp.body

    def _count(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n


class FsRangeSource:
    """A file on any fsspec filesystem (local, s3://, hf://): ranged ``cat_file`` reads."""

    def __init__(self, fs: AbstractFileSystem, path: str, label: str | None = None) -> None:
        self.fs, self.path, self.label = fs, path, label or path
        self.bytes_read = 0
        self._size: int | None = None
        self._lock = threading.Lock()

    def size(self) -> int:
        if self._size is None:
            self._size = int(self.fs.size(self.path))
        return self._size

    def tail(self, n: int) -> tuple[int, bytes]:
        size = self.size()
        return size, self.read(max(0, size - n), size - 1)

    def read(self, start: int, end: int) -> bytes:
        data: bytes = self.fs.cat_file(self.path, start=start, end=end + 1)
        with self._lock:
            self.bytes_read += len(data)
        if len(data) != end - start + 1:
            raise FetchError(
                TRUNCATED, f"read {len(data)} of {end - start + 1} bytes at {start}", url=self.label
            )
        return data
