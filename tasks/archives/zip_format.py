"""Read only the referenced members of a zip, wherever it lives (:mod:`.ranges`).

The central directory is read from the end of the archive with range requests (one suffix request, plus one
more when the directory is larger than 64 KiB), then each referenced member's bytes are read with range
requests, neighbouring members coalesced into one request. Every member is checked against the CRC-32 and
size the central directory records, and against the member rule of :mod:`.members`.
"""

from __future__ import annotations

import bz2
import io
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..http import (
    BAD_ARCHIVE,
    HASH_MISMATCH,
    NOT_IN_ARCHIVE,
    TOO_LARGE,
    TRUNCATED,
    UNSAFE_MEMBER,
    FetchError,
)
from .archive_members import normalize_member, unsafe_member_reason
from .ranges import RangeSource

EOCD_SEARCH = 65_536 + 22  # the end-of-central-directory record sits in the last 64 KiB + 22 bytes
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_SIG = b"PK\x03\x04"
_SLACK = 1024  # bytes read past a member's data to cover a local extra field longer than the central one


@dataclass(frozen=True, slots=True)
class ZipEntry:
    name: str  # as recorded
    header_offset: int
    compress_size: int
    file_size: int
    crc: int
    method: int
    flags: int
    external_attr: int
    name_len: int  # bytes of the encoded name (for the local header estimate)
    extra_len: int

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")

    @property
    def unsafe(self) -> str | None:
        mode = self.external_attr >> 16
        return unsafe_member_reason(self.name, symlink=stat.S_ISLNK(mode))


@dataclass(frozen=True)
class ZipIndex:
    """The parsed central directory, and the raw tail it came from (cached in the store by the caller)."""

    size: int
    region_start: int
    region: bytes  # archive bytes [region_start, size): central directory and end records
    entries: dict[str, ZipEntry]  # by normalised name; the first of duplicate names wins

    def get(self, member: str) -> ZipEntry | None:
        return self.entries.get(normalize_member(member))


class _RegionFile(io.RawIOBase):
    """A seekable view of an archive of known size where only ``region`` is present; reading outside it
    asks ``source`` (zipfile reads the end records and the central directory through this)."""

    def __init__(self, size: int, region_start: int, region: bytes, source: RangeSource | None) -> None:
        self.size, self.region_start, self.region, self.source = size, region_start, region, source
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        if n <= 0:
            return b""
        start, end = self.pos, self.pos + n
        if start >= self.region_start:
            data = self.region[start - self.region_start : end - self.region_start]
        elif self.source is not None:  # before the cached region: fetch the gap and extend the region
            gap = self.source.read(start, self.region_start - 1)
            self.region, self.region_start = gap + self.region, start
            data = self.region[: end - start]
        else:
            raise FetchError(BAD_ARCHIVE, "central directory outside the cached region")
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def read_zip_index(source: RangeSource, cached: tuple[int, int, bytes] | None = None) -> ZipIndex:
    """Parse the central directory of a zip through ``source`` (or from ``cached`` = (size, region_start,
    region) without any request). Raises FetchError(bad_archive) for anything that is not a zip."""
    if cached is not None:
        size, region_start, region = cached
        fileobj = _RegionFile(size, region_start, region, None)
    else:
        size, tail = source.tail(EOCD_SEARCH)
        fileobj = _RegionFile(size, size - len(tail), tail, source)
    try:
        with zipfile.ZipFile(fileobj) as zf:
            infos = zf.infolist()
            start_dir = getattr(zf, "start_dir", fileobj.region_start)
    except FetchError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, struct.error, ValueError, EOFError) as exc:
        raise FetchError(BAD_ARCHIVE, f"not a readable zip: {exc}", url=source.label) from None
    entries: dict[str, ZipEntry] = {}
    for info in infos:
        encoded = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
        entry = ZipEntry(
            name=info.filename,
            header_offset=info.header_offset,
            compress_size=info.compress_size,
            file_size=info.file_size,
            crc=info.CRC,
            method=info.compress_type,
            flags=info.flag_bits,
            external_attr=info.external_attr,
            name_len=len(encoded),
            extra_len=len(info.extra),
        )
        entries.setdefault(normalize_member(info.filename), entry)
    keep_from = max(0, min(start_dir, fileobj.region_start))
    region = fileobj.region[keep_from - fileobj.region_start :]
    return ZipIndex(size=size, region_start=keep_from, region=region, entries=entries)


def _decompress(entry: ZipEntry, raw: bytes, label: str) -> bytes:
    if entry.method == zipfile.ZIP_STORED:
        data = raw
    elif entry.method == zipfile.ZIP_DEFLATED:
        d = zlib.decompressobj(-15)
        try:
            data = d.decompress(raw, entry.file_size + 1)
        except zlib.error as exc:
            raise FetchError(BAD_ARCHIVE, f"{entry.name}: deflate error: {exc}", url=label) from None
    elif entry.method == zipfile.ZIP_BZIP2:
        try:
            data = bz2.BZ2Decompressor().decompress(raw, entry.file_size + 1)
        except OSError as exc:
            raise FetchError(BAD_ARCHIVE, f"{entry.name}: bzip2 error: {exc}", url=label) from None
    else:
        raise FetchError(
            BAD_ARCHIVE, f"{entry.name}: unsupported compression method {entry.method}", url=label
        )
    if len(data) > entry.file_size:  # inflates past the size the directory declares: a bomb, not a cut
        raise FetchError(
            BAD_ARCHIVE,
            f"{entry.name}: inflates past the {entry.file_size} bytes the central directory declares "
            "(stopped there)",
            url=label,
        )
    if len(data) != entry.file_size:
        raise FetchError(
            TRUNCATED,
            f"{entry.name}: {len(data)} bytes after decompression, expected {entry.file_size}",
            url=label,
        )
    if zlib.crc32(data) != entry.crc:
        raise FetchError(
            HASH_MISMATCH, f"{entry.name}: CRC-32 does not match the central directory", url=label
        )
    return data


def check_zip_entry(entry: ZipEntry | None, member: str, max_bytes: int, label: str) -> FetchError | None:
    """Why a referenced member cannot be served (missing, unsafe, encrypted, too large), or None."""
    if entry is None or entry.is_dir:
        return FetchError(NOT_IN_ARCHIVE, f"{member} is not in the archive", url=label)
    bad = entry.unsafe
    if bad:
        return FetchError(UNSAFE_MEMBER, f"{entry.name}: {bad}", url=label)
    if entry.flags & 0x1:
        return FetchError(BAD_ARCHIVE, f"{entry.name}: encrypted member", url=label)
    if entry.file_size > max_bytes:
        return FetchError(
            TOO_LARGE, f"{entry.name}: {entry.file_size} bytes exceed the cap of {max_bytes}", url=label
        )
    return None


def plan_ranges(
    entries: Iterable[ZipEntry], *, gap: int = 256 * 1024, span: int = 64 * 1024 * 1024
) -> list[list[ZipEntry]]:
    """Group members (sorted by offset) whose byte ranges are within ``gap`` of each other, each group at
    most ``span`` bytes, so one range request reads several neighbours."""
    groups: list[list[ZipEntry]] = []
    group_start = group_end = -1
    for e in sorted(entries, key=lambda e: e.header_offset):
        start, end = e.header_offset, _estimated_end(e)
        if groups and start - group_end <= gap and end - group_start <= span:
            groups[-1].append(e)
            group_end = max(group_end, end)
        else:
            groups.append([e])
            group_start, group_end = start, end
    return groups


def _estimated_end(e: ZipEntry) -> int:
    return e.header_offset + _LOCAL_HEADER.size + e.name_len + e.extra_len + e.compress_size + _SLACK


def read_zip_group(
    source: RangeSource, index: ZipIndex, group: list[ZipEntry]
) -> Iterator[tuple[ZipEntry, bytes | FetchError]]:
    """Read one planned group with one range request (plus one per member whose local extra field was
    longer than estimated) and yield each member's verified bytes or its error."""
    start = group[0].header_offset
    end = min(index.size, max(_estimated_end(e) for e in group)) - 1
    block = source.read(start, end)
    for e in group:
        try:
            yield e, _member_from_block(source, index, e, block, start)
        except FetchError as err:
            yield e, err


def _member_from_block(
    source: RangeSource, index: ZipIndex, e: ZipEntry, block: bytes, block_start: int
) -> bytes:
    off = e.header_offset - block_start
    head = block[off : off + _LOCAL_HEADER.size]
    if len(head) < _LOCAL_HEADER.size:
        raise FetchError(TRUNCATED, f"{e.name}: local header cut short", url=source.label)
    sig, _v, _flags, _method, _t, _d, _crc, _cs, _us, n, m = _LOCAL_HEADER.unpack(head)
    if sig != _LOCAL_SIG:
        raise FetchError(
            HASH_MISMATCH,
            f"{e.name}: no local header at offset {e.header_offset} (archive changed?)",
            url=source.label,
        )
    data_start = off + _LOCAL_HEADER.size + n + m
    raw = block[data_start : data_start + e.compress_size]
    if len(raw) < e.compress_size:  # the local extra field was longer than the central one
        abs_start = block_start + data_start + len(raw)
        raw += source.read(abs_start, block_start + data_start + e.compress_size - 1)
    return _decompress(e, raw, source.label)
