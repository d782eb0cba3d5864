"""Stream a tar (plain or compressed) once, front to back, with bounded memory: referenced members are
handed to the caller as they pass, the archive's sha256 can be computed on the way (:class:`HashingReader`),
and tar headers that would make ``tarfile`` allocate or recurse without bound are refused
(:class:`SafeTarInfo`). Members are judged by the rule of :mod:`.members`.
"""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from ..http import BAD_ARCHIVE, TOO_LARGE, TRUNCATED, UNSAFE_MEMBER, FetchError
from .archive_members import normalize_member, tar_member_problem

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
        while (m := _next_member(tf, label)) is not None:
            name = normalize_member(m.name)
            if (wanted is not None and name not in wanted) or m.isdir():
                continue
            bad = tar_member_problem(m)
            if bad:
                err = FetchError(UNSAFE_MEMBER, f"{m.name}: {bad}", url=label)
                yield TarMember(name, m.name, m.size, err, None)
            elif m.size > max_bytes:
                err = FetchError(
                    TOO_LARGE, f"{m.name}: {m.size} bytes exceed the cap of {max_bytes}", url=label
                )
                yield TarMember(name, m.name, m.size, err, None)
            else:
                yield TarMember(name, m.name, m.size, None, tf.extractfile(m))  # type: ignore[arg-type]


def _next_member(tf: tarfile.TarFile, label: str) -> tarfile.TarInfo | None:
    """The next member header, or None at the end; a damaged stream is a FetchError (truncated or
    bad_archive)."""
    try:
        return tf.next()
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
