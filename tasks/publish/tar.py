"""Deterministic shard tars: GNU format, fixed headers, ``tarfile``-identical padding, hashed as written.

A shard's bytes depend only on its samples: members ``<key>.<record>`` then the media parts in order,
headers from :func:`~.members.tar_header` (long names via ``././@LongLink``, never pax headers), padded to
10 KiB records exactly like :mod:`tarfile`. So a rewrite, a resumed write or another machine gives
byte-identical shards. :class:`TarOut` lists each member as it writes it, and :func:`tar_members` reads a
shard's headers back as :mod:`tarfile` reads them (a shard kept from an interrupted attempt): Energon's index
is built from either (:mod:`.shard_index`).
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import tarfile
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from .samples import EnergonPrepareError, MediaPart
from .tar_members import BLOCK, Prepared, padded

__all__ = ["TarMember", "TarOut", "file_sha256", "header_byte_sum", "tar_members"]

_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads the archive to a multiple of this
_WRITE_BUFFER = 1 << 20
_SMALL_WRITE = 1 << 16
_READ_WINDOW = 1 << 16


class TarMember(NamedTuple):
    """A regular member as :mod:`tarfile` reports it: ``offset`` is where its first header starts (the
    ``././@LongLink`` header of a long name), ``end`` where the next member (or the end marker) starts."""

    name: str
    offset: int
    offset_data: int
    size: int

    @property
    def end(self) -> int:
        return self.offset_data + padded(self.size)


class _Hasher:
    """sha256 of a byte stream on a helper thread (hashlib releases the GIL), so hashing overlaps writing."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._run, name="vlmforge-shard-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def hexdigest(self) -> str:
        self._queue.put(None)
        self._thread.join()
        return self._hash.hexdigest()

    def abort(self) -> None:
        self._queue.put(None)


class TarOut:
    """A shard being written: GNU tar bytes out, sha256 of what was written, tarfile-identical padding.

    Headers and padding are gathered into chunks of ~1 MiB; media bytes go out as they are. Each chunk is
    written with plain ``write`` calls and handed to a :class:`_Hasher`. ``members`` lists every member as
    :func:`tar_members` would read it back (what the shard's index is made from: :mod:`.shard_index`).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("wb", buffering=0)
        self.hasher = _Hasher()
        self.offset = 0
        self.members: list[TarMember] = []
        self._small = bytearray()

    def _write(self, data: bytes) -> None:
        self.offset += len(data)
        if len(data) < _SMALL_WRITE:
            self._small += data
            if len(self._small) >= _WRITE_BUFFER:
                self._flush_small()
        else:
            self._flush_small()
            self._emit(data)

    def _flush_small(self) -> None:
        if self._small:
            chunk, self._small = bytes(self._small), bytearray()
            self._emit(chunk)

    def _emit(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        view = memoryview(chunk)
        while view:
            written = self.handle.write(view)
            view = view[written or 0 :]

    def add(self, sample: Prepared) -> None:
        names, headers = sample.names, sample.headers
        self._member(names[0], headers[0], sample.record, None)
        for name, header, part in zip(names[1:], headers[1:], sample.parts, strict=True):
            self._member(name, header, part.load(), part)

    def _member(self, name: str, header: bytes, data: bytes, part: MediaPart | None) -> None:
        if part is not None and len(data) != part.size:
            raise OSError(
                f"{self.path.name}: media part {part.name!r} (sha256 {part.sha256[:12]}…) has {len(data)} "
                f"bytes, {part.size} were announced"
            )
        start, pad = self.offset, -len(data) % BLOCK
        self.members.append(TarMember(name, start, start + len(header), len(data)))
        if len(data) < _SMALL_WRITE:  # one write of a small member (a text shard's every member)
            self._write(b"".join((header, data, _ZERO_BLOCK[:pad])))
            return
        self._write(header)
        self._write(data)
        if pad:
            self._write(b"\0" * pad)

    def finish(self) -> tuple[int, str]:
        """End-of-archive marker and record padding (as ``tarfile.TarFile.close``); the handle stays open
        for the journal's syncer to fsync and close."""
        self._write(b"\0" * (2 * BLOCK))
        remainder = self.offset % _RECORD
        if remainder:
            self._write(b"\0" * (_RECORD - remainder))
        self._flush_small()
        return self.offset, self.hasher.hexdigest()

    def abort(self) -> None:
        """Drop the unfinished shard: it is not in the journal, so no resume would keep it, and after a full
        disk its bytes would hold the space the rest of the run needs."""
        self.hasher.abort()
        self.handle.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


_REGULAR = frozenset(tarfile.REGULAR_TYPES)
_ZERO_BLOCK = bytes(BLOCK)


def tar_members(path: Path) -> Iterator[TarMember]:
    """The regular members of an uncompressed tar up to its end-of-archive marker; raises
    :class:`EnergonPrepareError` on a broken header or a member that is not a regular file."""
    long_name: str | None = None
    start: int | None = None  # offset of a pending long name's header
    with path.open("rb") as handle:
        window = _Window(handle)
        offset = 0
        while len(header := window.read(offset, BLOCK)) == BLOCK and header != _ZERO_BLOCK:
            size = _header_size(path, header, offset)
            kind = header[156:157]
            if kind == tarfile.GNUTYPE_LONGNAME:
                name_field = window.read(offset + BLOCK, size)
                long_name, start = _nts(name_field), offset if start is None else start
            elif kind in _REGULAR:
                name = long_name if long_name is not None else _nts(header[:100])
                yield TarMember(name, offset if start is None else start, offset + BLOCK, size)
                long_name = start = None
            else:
                raise EnergonPrepareError(f"{path.name}: unexpected non-file member {_nts(header[:100])!r}")
            offset += BLOCK + padded(size)
        if header and header != _ZERO_BLOCK:
            raise EnergonPrepareError(f"{path.name}: truncated header at byte {offset}")


class _Window:
    """Reads of a file served from one window of it: a text shard's members are ~1 KiB apart, so a seek and
    a read per header cost more than the parse (a 40,000-member shard read 0.32 s that way)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.base, self.data = handle, 0, b""

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer at the end of the file)."""
        at = offset - self.base
        if at < 0 or at + n > len(self.data):
            self.handle.seek(offset)
            self.base, self.data, at = offset, self.handle.read(max(n, _READ_WINDOW)), 0
        return self.data[at : at + n]


def _header_size(path: Path, header: bytes, offset: int) -> int:
    try:
        chksum = int(header[148:156].split(b"\0", 1)[0].strip() or b"0", 8)
        size_field = header[124:136]
        if size_field[0] & 0x80:  # GNU base-256
            size = int.from_bytes(size_field[1:], "big")
        else:
            size = int(size_field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        size, chksum = -1, -1
    if size < 0 or chksum != header_byte_sum(header) - sum(header[148:156]) + 256:
        raise EnergonPrepareError(f"{path.name}: broken tar header at byte {offset}")
    return size


def header_byte_sum(header: bytes) -> int:
    """``sum(header)`` of a 512-byte tar header, 7x faster than ``sum`` (2.8 us a header, a third of the
    scan): the low half of Adler-32 is 1 + the bytes' sum modulo 65521, exact for 256 bytes (at most
    65,280)."""
    return (zlib.adler32(header[:256]) & 0xFFFF) + (zlib.adler32(header[256:]) & 0xFFFF) - 2


def _nts(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
