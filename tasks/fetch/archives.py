"""Read only the members a subset references from upstream archives.

- zip: the central directory is read from the end of the archive with range requests (one suffix request,
  plus one more when the directory is larger than 64 KiB), then each referenced member's bytes are read
  with range requests, neighbouring members coalesced into one request. Every member is checked against
  the CRC-32 and size the central directory records.
- tar (plain or compressed): streamed once, front to back; referenced members are handed to the caller as
  they pass, and the archive's sha256 is computed on the way when the recipe publishes one.

Members are matched by normalised path. A member that is a symlink, hardlink or device, has an absolute
name, or contains ``..`` is reported as ``unsafe_member`` and its bytes are never read; nothing from an
archive is ever written under a path taken from the archive (the store is content-addressed).
"""

from __future__ import annotations

import bz2
import hashlib
import io
import posixpath
import stat
import struct
import tarfile
import threading
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, Protocol

from fsspec import AbstractFileSystem

from .http import (
    BAD_ARCHIVE,
    HASH_MISMATCH,
    NOT_IN_ARCHIVE,
    TOO_LARGE,
    TRUNCATED,
    UNSAFE_MEMBER,
    FetchError,
    HttpClient,
    redact,
)

EOCD_SEARCH = 65_536 + 22  # the end-of-central-directory record sits in the last 64 KiB + 22 bytes
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_SIG = b"PK\x03\x04"
_SLACK = 1024  # bytes read past a member's data to cover a local extra field longer than the central one


def normalize_member(name: str) -> str:
    """Path form used for matching (``./a//b`` -> ``a/b``; a leading ``/`` is dropped, ``..`` kept)."""
    return posixpath.normpath(name.replace("\\", "/")).lstrip("/")


def unsafe_member_reason(name: str, *, symlink: bool = False, hardlink: bool = False) -> str | None:
    """Why an archive member may never be served, or None."""
    if symlink:
        return "symlink member"
    if hardlink:
        return "hardlink member"
    raw = name.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        return "absolute member path"
    if ".." in raw.split("/"):
        return "member path escapes its folder ('..')"
    if "\x00" in raw:
        return "NUL byte in member name"
    return None


# ------------------------------------------------------------------------------------------ range sources


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

    def __init__(self, client: HttpClient, url: str, deadline: float | None = None) -> None:
        self.client, self.url, self.label = client, url, redact(url)
        self.deadline = deadline  # time.monotonic() value bounding every request (a batch's deadline)
        self.bytes_read = 0
        self._lock = threading.Lock()

    def tail(self, n: int) -> tuple[int, bytes]:
        resp = self.client.get(self.url, suffix=n, max_bytes=n, deadline=self.deadline)
        self._count(resp.nbytes)
        if resp.total_size is None:
            raise FetchError(BAD_ARCHIVE, "server sent no Content-Range total", url=self.url)
        return resp.total_size, resp.body

    def read(self, start: int, end: int) -> bytes:
        resp = self.client.get(
            self.url, byte_range=(start, end), max_bytes=end - start + 1, deadline=self.deadline
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


# ------------------------------------------------------------------------------------------------- zip


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


# ------------------------------------------------------------------------------------------------- tar

#: Largest GNU long-name / long-link or pax extended header read (real ones are a few hundred bytes).
MAX_TAR_HEADER_BYTES = 1024 * 1024
#: Most extended headers chained in front of one member (tarfile follows them recursively).
MAX_TAR_HEADER_CHAIN = 16
_EXT_HEADER_TYPES = frozenset(
    {
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    }
)


class TarHeaderBomb(tarfile.ReadError):
    """A tar header tarfile would read whole into memory (or recurse on) beyond the limits above."""


class SafeTarInfo(tarfile.TarInfo):
    """``tarfile.TarInfo`` with bounded header processing; pass as ``tarfile.open(..., tarinfo=SafeTarInfo)``.

    tarfile reads a GNU long-name or pax header into memory whole, whatever size it declares (a 200 KB
    ``.tar.gz`` can declare a 200 MB name), follows chained headers recursively, and collects GNU sparse maps
    block after block. Here a header over :data:`MAX_TAR_HEADER_BYTES`, more than
    :data:`MAX_TAR_HEADER_CHAIN` chained headers, or an extended sparse map stops the archive with
    :class:`TarHeaderBomb` (a ``tarfile.ReadError``) before anything is allocated."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type == tarfile.GNUTYPE_SPARSE and getattr(self, "_sparse_structs", (None, False))[1]:
            raise TarHeaderBomb(
                f"{self.name!r}: GNU sparse member with an extended sparse map (not supported)"
            )
        if self.type not in _EXT_HEADER_TYPES:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        if self.size > MAX_TAR_HEADER_BYTES:
            raise TarHeaderBomb(
                f"extended header of {self.size} bytes at offset {self.offset} "
                f"(limit {MAX_TAR_HEADER_BYTES}): refused before reading it"
            )
        depth = getattr(tarfile_, "_vlmforge_header_chain", 0)
        if depth >= MAX_TAR_HEADER_CHAIN:
            raise TarHeaderBomb(
                f"more than {MAX_TAR_HEADER_CHAIN} chained extended headers at offset {self.offset}"
            )
        tarfile_._vlmforge_header_chain = depth + 1  # type: ignore[attr-defined]
        try:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        finally:
            tarfile_._vlmforge_header_chain = depth  # type: ignore[attr-defined]


def open_tar_stream(fileobj: Any, mode: Literal["r|*", "r|"] = "r|*") -> tarfile.TarFile:
    """``tarfile.open`` in stream mode with :class:`SafeTarInfo` (bounded headers)."""
    return tarfile.open(fileobj=fileobj, mode=mode, tarinfo=SafeTarInfo)


class HashingReader:
    """Counts and hashes every byte read from ``raw`` (the archive as transferred)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.nbytes += len(data)
        return data

    def drain(self) -> None:
        while self.read(1024 * 1024):
            pass

    def hexdigest(self) -> str:
        return self.sha.hexdigest()


@dataclass
class TarMember:
    """One member passing by in a tar stream; read ``fileobj`` before asking for the next member."""

    name: str  # normalised
    raw_name: str
    size: int
    error: FetchError | None
    fileobj: BinaryIO | None


def iter_tar(stream: BinaryIO, wanted: set[str] | None, *, max_bytes: int, label: str) -> Iterator[TarMember]:
    """Stream a tar (any compression) once, yielding the members whose normalised name is in ``wanted``
    (every member when ``wanted`` is None). Unsafe or oversized members come with an error and no data."""
    try:
        tf = open_tar_stream(stream)  # closed by the with below
    except (tarfile.ReadError, tarfile.CompressionError, EOFError, OSError) as exc:
        raise FetchError(BAD_ARCHIVE, f"not a readable tar: {exc}", url=label) from None
    with tf:
        while True:
            try:
                m = tf.next()
            except FetchError:
                raise
            except EOFError as exc:
                raise FetchError(TRUNCATED, f"tar stream ended early: {exc}", url=label) from None
            except TarHeaderBomb as exc:
                raise FetchError(BAD_ARCHIVE, f"tar: {exc}", url=label) from None
            except RecursionError:
                raise FetchError(BAD_ARCHIVE, "tar: headers nested too deeply", url=label) from None
            except (tarfile.ReadError, tarfile.CompressionError, zlib.error, OSError) as exc:
                text = str(exc)
                failure = TRUNCATED if "unexpected end" in text.lower() else BAD_ARCHIVE
                raise FetchError(failure, f"tar: {text}", url=label) from None
            if m is None:
                return
            name = normalize_member(m.name)
            if wanted is not None and name not in wanted:
                continue
            if m.isdir():
                continue
            bad = unsafe_member_reason(m.name, symlink=m.issym(), hardlink=m.islnk())
            if bad is None and not m.isreg():
                bad = "not a regular file"
            if bad:
                yield TarMember(
                    name, m.name, m.size, FetchError(UNSAFE_MEMBER, f"{m.name}: {bad}", url=label), None
                )
                continue
            if m.size > max_bytes:
                err = FetchError(
                    TOO_LARGE, f"{m.name}: {m.size} bytes exceed the cap of {max_bytes}", url=label
                )
                yield TarMember(name, m.name, m.size, err, None)
                continue
            yield TarMember(name, m.name, m.size, None, tf.extractfile(m))  # type: ignore[arg-type]
