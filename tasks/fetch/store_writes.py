"""How fetched bytes reach the content-addressed store, and how the store's upstream index answers a
reference without fetching it.

An object is streamed into a :class:`StoreSink` (hashed on the way; large ones spill to a temp file in the
store's incoming folder), checked against the sha256 an earlier run recorded, published by rename
(``<store>/<sha[:2]>/<sha>``), and its upstream locator is recorded in the upstream index
(``<store>/upstream/``). So an object is fetched once, whichever subsets, batches or runs reference it, and
a killed run resumes without fetching anything twice. Locators are recorded without credentials.

Each object is hashed once, on the way in, and its bytes (when held in memory) are handed to the media step
with its outcome (:class:`~.outcomes.HeldBytes`, up to the batch's :data:`HELD_BYTES`), not read back from
the store.

Durability: originals are stored without a sync. Most are never published (the media step stores a resized
copy), and a sync per object cost 0.3-1 ms of CPU. A process killed at any moment leaves nothing partial
under a final name (temp file, then rename). A power loss can: an object not yet written back may be empty
or short under its content name. Two rules make such an object never trusted:

- whatever a batch publishes is synced before the batch's completion marker is written: the media step
  stores every output through ``ContentStore.put`` (durable), which also syncs an object already there,
  so a kept original is on disk before the manifest row naming it commits;
- whatever the fetch stage answers from the store without having written it in this batch (an upstream
  index hit, or another worker's fetch it waited for) is read and hashed first
  (``ContentStore.verified``): a damaged object is fetched again, and its write replaces it whole.
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
from ..http import HASH_MISMATCH, FetchError
from ..storage import ContentStore
from .outcomes import Answer, FetchOutcome, HeldPool

#: bytes of fetched objects a batch's outcomes may hold for the media step at once (see HeldPool)
HELD_BYTES = 64 * 1024 * 1024


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

    def publish(self) -> bytes | None:
        """Store the object under its sha256, without a sync (see the module docstring); returns its bytes
        when they were held in memory (None when they spilled to a file)."""
        sha = self.digest()
        if self._file is not None and self._path is not None:
            self._file.close()
            self._file = None
            self.store.put_file(self._path, sha)
            self._path = None
            return None
        data = b"".join(self._parts)
        self._parts.clear()
        self.store.put(data, sha, durable=False)
        return data

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
        self.held = HeldPool(HELD_BYTES)
        self._lock = threading.Lock()

    def sink(self) -> StoreSink:
        return StoreSink(self.store, self.spill_bytes)

    def cached(self, ref: str, kind: str, upstream: str) -> FetchOutcome | None:
        """The reference answered by the upstream index, or None (not indexed, not the object an earlier
        run recorded for it, or a local object that is not whole: then it is fetched again, and a mismatch
        reported). A local object is read and hashed here, and its bytes go with the outcome."""
        upstream = redact(upstream)
        entry = self.store.lookup(upstream)
        if entry is None:
            return None
        sha = str(entry["sha256"])
        want = self.expected.get(ref)
        if want is not None and want != sha:
            return None
        held = None
        if self.store.local:
            data = self.store.verified(sha)
            if data is None:
                return None
            held = self.held.hold(data)
        return FetchOutcome(
            ref, "ok", kind, upstream, sha, int(entry.get("bytes", 0)), cached=True, held=held
        )

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
        data = self.keep(upstream, sink)
        held = None if data is None else self.held.hold(data)
        return FetchOutcome(ref, "ok", kind, upstream, sha, nbytes, attempts=attempts, held=held)

    def keep(self, upstream: str, sink: StoreSink) -> bytes | None:
        """Store the sink's object and index it under ``upstream`` (no reference asked for it yet: a tar
        streamed with ``extract: all``); its bytes when they were held in memory."""
        sha, nbytes = sink.digest(), sink.nbytes
        existed = self.store.has(sha)
        data = sink.publish()
        self.store.record(redact(upstream), {"sha256": sha, "bytes": nbytes})
        if not existed:
            with self._lock:
                self.bytes_stored += nbytes
        return data
