"""How fetched bytes reach the content-addressed store, and how the store's upstream index answers a
reference without fetching it.

An object is streamed into a :class:`StoreSink` (hashed on the way; large ones spill to a temp file in the
store's incoming folder), checked against the sha256 an earlier run recorded, published by rename
(``<store>/<sha[:2]>/<sha>``), and its upstream locator is recorded in the upstream index
(``<store>/upstream/``). So an object is fetched once, whichever subsets, batches or runs reference it, and
a killed run resumes without fetching anything twice. Locators are recorded without credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from collections.abc import Mapping
from typing import BinaryIO

from ...schemas.redact import redact
from ..storage import ContentStore
from .failures import HASH_MISMATCH, FetchError
from .outcomes import Answer, FetchOutcome


class StoreSink:
    """Receives one object's bytes, hashing them; small objects stay in memory, large ones spill to a
    temp file in the store's incoming folder. Nothing is visible in the store until :meth:`publish`."""

    def __init__(self, store: ContentStore, spill_bytes: int) -> None:
        self.store, self.spill_bytes = store, spill_bytes
        self._sha = hashlib.sha256()
        self._parts: list[bytes] = []
        self._file: BinaryIO | None = None
        self._path: str | None = None
        self.nbytes = 0

    def write(self, data: bytes) -> None:
        self._sha.update(data)
        self.nbytes += len(data)
        if self._file is None and self.nbytes > self.spill_bytes:
            self._path = os.path.join(self.store.incoming_dir(), f"{uuid.uuid4().hex}.part")
            self._file = open(self._path, "wb")  # noqa: SIM115 - closed in publish/discard
            for p in self._parts:
                self._file.write(p)
            self._parts.clear()
        if self._file is not None:
            self._file.write(data)
        else:
            self._parts.append(data)

    def reset(self) -> None:
        self.discard()
        self._sha = hashlib.sha256()
        self.nbytes = 0

    def digest(self) -> str:
        return self._sha.hexdigest()

    def publish(self) -> str:
        sha = self.digest()
        if self._file is not None and self._path is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            self.store.put_file(self._path, sha)
            self._path = None
        else:
            self.store.put(b"".join(self._parts), sha)
            self._parts.clear()
        return sha

    def discard(self) -> None:
        self._parts.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
            self._path = None


class StoreWriter:
    """The store side of one batch: upstream-index lookups, checked publishes, and the bytes it added."""

    def __init__(self, store: ContentStore, spill_bytes: int, expected: Mapping[str, str]) -> None:
        self.store, self.spill_bytes, self.expected = store, spill_bytes, expected
        self.bytes_stored = 0  # new objects' bytes
        self._lock = threading.Lock()

    def sink(self) -> StoreSink:
        return StoreSink(self.store, self.spill_bytes)

    def cached(self, ref: str, kind: str, upstream: str) -> FetchOutcome | None:
        """The reference answered by the upstream index, or None (not indexed, or not the object an
        earlier run recorded for it: then it is fetched again and the mismatch reported)."""
        upstream = redact(upstream)
        entry = self.store.lookup(upstream)
        if entry is None:
            return None
        sha = str(entry["sha256"])
        want = self.expected.get(ref)
        if want is not None and want != sha:
            return None
        return FetchOutcome(ref, "ok", kind, upstream, sha, int(entry.get("bytes", 0)), cached=True)

    def publish(self, ref: str, kind: str, upstream: str, sink: StoreSink, attempts: int) -> Answer:
        """Store the sink's object as the answer for ``ref`` (a ``hash_mismatch`` when it is not the object
        an earlier run recorded)."""
        upstream = redact(upstream)
        sha = sink.digest()
        want = self.expected.get(ref)
        if want is not None and want != sha:
            sink.discard()
            return FetchError(
                HASH_MISMATCH, f"sha256 {sha[:12]}... differs from the expected {want[:12]}...", url=upstream
            )
        nbytes = sink.nbytes
        self.keep(upstream, sink)
        return FetchOutcome(ref, "ok", kind, upstream, sha, nbytes, attempts=attempts)

    def keep(self, upstream: str, sink: StoreSink) -> None:
        """Store the sink's object and index it under ``upstream`` (no reference asked for it yet: a tar
        streamed with ``extract: all``)."""
        sha, nbytes = sink.digest(), sink.nbytes
        existed = self.store.has(sha)
        sink.publish()
        self.store.record(redact(upstream), {"sha256": sha, "bytes": nbytes})
        if not existed:
            with self._lock:
                self.bytes_stored += nbytes
