"""The release's own media, and the one way the pipeline finds a reference on disk.

A reference is looked up (first hit wins) in ``<subset>/<ref>``, ``<subset>/media/<ref>``, then among the
members of the subset's ``media/shard_*.tar``: by normalised path, else by the reference's file name alone
when exactly one member has that name (NVIDIA's converter for this release, Bridge's
``prepare_nemotron_image_v3.py``, resolves references the same way). A path or file name that two members
answer to (in two tars, or twice in one tar) is never served: it is a miss whose text starts ``ambiguous:``
and names the members. Not ``tar -x``'s last-wins: across tars "last" is only the order the tars happen to
be listed in, and inside one tar an appended copy is as likely a packing accident as an update; a reject
that names both lets a person decide, and it is the verdict NVIDIA's converter gives.

Names match in Unicode NFC on both sides: a reference typed in NFC finds a file or member whose name is
stored in NFD (macOS writes NFD) and the reverse; where two different names on disk normalise alike and
neither is the exact reference, the miss is ``ambiguous:`` too. The subset folder and its tars may
live on any fsspec filesystem (the catalog gives them as URLs; the release's ``storage_options`` come
along). Tar members are read by offset, so a batch pulls only the members it references; the member table
is read header to header by seeking (:mod:`.tar_index`: bounded headers, never a member's bytes), and
members are judged by the archive rule of :mod:`.members` (links, devices and escaping names are never
served). A member whose header claims more bytes than the tar holds is a ``truncated`` miss of its own
reference, found while indexing; every read is bounded by the file's real size, and with a ``deadline``
(the batch's) indexing stops there and the misses it leaves are ``timeout``.

Symlinks: a media root is the user's own folder and its symlinks are followed. A symlink inside the release
(the subset folder, ``media/``) is followed only while its target stays inside the subset folder: a release
nobody here controls must not be able to pull ``/etc/passwd`` or ``~/.aws/credentials`` into a shard. An
unreadable or corrupt media tar makes its members unavailable (named in the "not found" text), never an
exception that stops the batch.

Two callers share this module: the ``release_tar`` recipe source (:mod:`.sources.release_tar`) and
:class:`MediaResolver`, the path a batch takes without a remote recipe (media roots, then the release).
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import unicodedata
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from ...schemas.reasons import REASONS, reason
from ..archives import (
    IndexDeadline,
    claims_past_end,
    normalize_member,
    past_end_text,
    real_size,
    seek_members,
    tar_member_problem,
)
from ..http import NOT_FOUND, SOURCE_ERROR, TIMEOUT, TRUNCATED, UNSAFE_MEMBER
from ..parse import normalize_ref, unsafe_ref_reason
from ..storage import is_local, url_to_fs
from .outcomes import LocalLocation


class MissingMedia(Exception):
    """No location holds the reference, or the one that does may not be read. ``failure`` is the fetch
    failure class the same miss has as a recipe source's answer."""

    def __init__(self, detail: str, failure: str = NOT_FOUND) -> None:
        super().__init__(detail)
        self.failure = failure

    def reasons(self, ref: str) -> tuple[str, str]:
        """(the media row's reason, the sample's) of a batch that read the release itself: a miss whose
        class is also a media-level reason (``truncated``: a tar member claiming more than the tar holds)
        is that media reject, ``media_error: <ref>: <code>``; any other miss is ``missing_media``."""
        if REASONS[self.failure].level == "media":
            return reason(self.failure, str(self)), reason("media_error", f"{ref}: {self.failure}")
        return reason("missing_media", str(self)), reason("missing_media", ref)


@dataclass(frozen=True, slots=True)
class Resolved:
    source: str  # media_root | subset | media | tar:<file name>
    data: bytes


class ReleaseMedia:
    """The media of one subset in the release; reuse it for a whole batch (the tar index is built once).
    ``deadline`` (``time.monotonic()``, the batch's) bounds building the tar index."""

    #: fsspec ``open`` options of a media tar on a remote filesystem (the estimate reads no readahead)
    remote_open_options: Mapping[str, Any] = {}

    def __init__(
        self,
        subset_path: str,
        media_tars: tuple[str, ...] = (),
        *,
        storage_options: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> None:
        self.fs, self.subset_path = url_to_fs(subset_path, **dict(storage_options or {}))
        self.media_tars = media_tars
        self.deadline = deadline
        self._jail = os.path.realpath(self.subset_path) if is_local(self.fs) else None
        self._tar_index: TarIndex | None = None
        self._tar_errors: list[str] = []
        self._tar_deadline: str | None = None  # the tar indexing stopped in, at the deadline

    def locate(self, rel: str) -> tuple[str, LocalLocation] | None:
        """Where the normalised reference ``rel`` lives, as (``subset`` | ``media`` | ``tar:<name>``,
        location), or None. Raises MissingMedia(unsafe_member) for a symlink leaving the subset folder."""
        for folder, place in ((self.subset_path, "subset"), (f"{self.subset_path}/media", "media")):
            path = file_in(self.fs, folder, rel, jail=self._jail)
            if path is not None:
                return place, LocalLocation(path if is_local(self.fs) else self.fs.unstrip_protocol(path))
        member = self._tars().find(rel)
        if member is None:
            return None
        return f"tar:{member.path.rsplit('/', 1)[-1]}", member

    def where(self, rel: str) -> LocalLocation | MissingMedia:
        """Where ``rel`` lives in the release, or the miss (not found, unsafe) that a source answers with."""
        try:
            hit = self.locate(rel)
        except MissingMedia as exc:
            return exc
        return self.not_found() if hit is None else hit[1]

    def not_found(self, *, media_roots: bool = False) -> MissingMedia:
        """The miss of a reference no location holds (naming the media tars that could not be read)."""
        where = "media roots, subset folder" if media_roots else "subset folder"
        if self._tar_deadline is not None:
            return MissingMedia(
                f"not found in {where} or media/, and the batch deadline came while indexing the media tars "
                f"({self._tar_deadline})",
                TIMEOUT,
            )
        unreadable = f"; unreadable media tar(s): {'; '.join(self._tar_errors)}" if self._tar_errors else ""
        return MissingMedia(f"not found in {where}, media/ or media tars{unreadable}")

    def read(self, location: LocalLocation, what: str) -> bytes:
        """The bytes at ``location`` (a file or a tar member of this release); ``what`` names a file."""
        return read_location(location, what, fs=self.fs)

    def _tars(self) -> TarIndex:
        if self._tar_index is None:
            self._tar_index = TarIndex()
            for tar_path in self.media_tars:
                try:
                    self._index_tar(tar_path, self._tar_index)
                except IndexDeadline as exc:
                    self._tar_deadline = f"{tar_path.rsplit('/', 1)[-1]}: {exc}"
                    break
                except (tarfile.TarError, OSError, EOFError, zlib.error, RecursionError) as exc:
                    # members indexed before the damage stay available; the rest are reported missing
                    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
                    self._tar_errors.append(f"{tar_path.rsplit('/', 1)[-1]}: {detail}")
        return self._tar_index

    def _index_tar(self, tar_path: str, index: TarIndex) -> None:
        options = {} if is_local(self.fs) else dict(self.remote_open_options)
        name = tar_path.rsplit("/", 1)[-1]
        with self.fs.open(_path_of(self.fs, tar_path), "rb", **options) as f:
            size = real_size(f)
            for m in seek_members(f, size, deadline=self.deadline):
                if m.isdir() or tar_member_problem(m):
                    continue  # links, devices and members escaping their folder: never served
                lie = past_end_text(m, size, name) if claims_past_end(m, size) else None
                index.add(m.name, LocalLocation(tar_path, m.offset_data, m.size), problem=lie)


def nfc(name: str) -> str:
    """The Unicode form names are matched in (ASCII names are returned as they are, cheaply)."""
    return name if name.isascii() else unicodedata.normalize("NFC", name)


_Member = tuple[str, LocalLocation]  # (member name as stored, where its bytes are)


class TarIndex:
    """The regular members of a subset's media tars, by NFC normalised path and by file name. A key two
    members answer to is kept aside with both, so a lookup names them instead of choosing one."""

    def __init__(self) -> None:
        self._paths: dict[str, _Member] = {}
        self._names: dict[str, _Member] = {}
        self._clashes: dict[tuple[bool, str], list[_Member]] = {}
        self._problems: dict[LocalLocation, str] = {}  # members found but never read (a lying size)

    def add(self, member_name: str, location: LocalLocation, *, problem: str | None = None) -> None:
        """Index one member; with ``problem`` (its header claims more than the tar holds) a lookup that
        lands on it is a ``truncated`` miss that says so."""
        if problem is not None:
            self._problems[location] = problem
        path = nfc(normalize_member(member_name))
        for by_name, table, key in ((False, self._paths, path), (True, self._names, path.rsplit("/", 1)[-1])):
            first = table.setdefault(key, (member_name, location))
            if first[1] != location:
                self._clashes.setdefault((by_name, key), [first]).append((member_name, location))

    def find(self, rel: str) -> LocalLocation | None:
        """The member the normalised reference names: its path, else its file name alone. Raises
        MissingMedia(``ambiguous: ...``) when that path or name belongs to more than one member."""
        path = nfc(rel)
        for by_name, table, key in ((False, self._paths, path), (True, self._names, path.rsplit("/", 1)[-1])):
            clash = self._clashes.get((by_name, key))
            if clash is not None:
                raise MissingMedia(_ambiguous(rel, "file name" if by_name else "path", clash))
            hit = table.get(key)
            if hit is not None:
                problem = self._problems.get(hit[1])
                if problem is not None:
                    raise MissingMedia(problem, TRUNCATED)
                return hit[1]
        return None


def _ambiguous(rel: str, what: str, members: list[_Member]) -> str:
    shown = ", ".join(f"{loc.path.rsplit('/', 1)[-1]}:{name}@{loc.offset}" for name, loc in members[:4])
    more = f" and {len(members) - 4} more" if len(members) > 4 else ""
    return (
        f"ambiguous: {rel}: {len(members)} media tar members have this {what} ({shown}{more}); "
        "use a unique relative path"
    )


class MediaResolver:
    """Resolves references of one subset without a recipe: each user media root, then the release
    (:class:`ReleaseMedia`). Reuse it for a whole batch."""

    def __init__(
        self,
        subset_path: str,
        media_tars: tuple[str, ...] = (),
        media_roots: tuple[str, ...] = (),
        *,
        storage_options: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> None:
        # The release's storage options (s3 endpoint, ...) apply to the subset folder and its tars; media
        # roots are the user's own locations and open with fsspec's defaults.
        self.release = ReleaseMedia(
            subset_path, media_tars, storage_options=storage_options, deadline=deadline
        )
        self.roots = [url_to_fs(r) for r in media_roots]

    def resolve(self, ref: str) -> Resolved:
        bad = unsafe_ref_reason(ref)
        if bad:  # the parser rejects these first; checked again because this function reads files
            raise MissingMedia(f"unsafe reference ({bad})", UNSAFE_MEMBER)
        rel = normalize_ref(ref)
        for fs, root in self.roots:
            path = file_in(fs, root, rel)
            if path is not None:
                return Resolved("media_root", read_location(LocalLocation(path), rel, fs=fs))
        try:
            hit = self.release.locate(rel)
        except MissingMedia as exc:
            if exc.failure != UNSAFE_MEMBER:
                raise  # ambiguous: the text says so
            raise MissingMedia(f"unsafe reference ({exc})", exc.failure) from None
        if hit is None:
            raise self.release.not_found(media_roots=True)
        place, location = hit
        return Resolved(place, self.release.read(location, rel))


def file_in(fs: AbstractFileSystem, folder: str, rel: str, *, jail: str | None = None) -> str | None:
    """The path of ``folder/rel`` when it is a file that stays inside ``folder``, else None. With ``jail``
    (a local real path), a file whose real path (symlinks resolved) leaves it raises
    MissingMedia(unsafe_member): the one symlink rule of the release."""
    base = folder.rstrip("/")
    path = posixpath.normpath(f"{base}/{rel}")
    if not path.startswith(base + "/"):
        return None
    if not _isfile(fs, path):
        twin = None if rel.isascii() else _unicode_twin(fs, base, path[len(base) + 1 :])
        if twin is None:
            return None
        path = twin
    if jail is not None:
        real = os.path.realpath(path)
        if real != jail and not real.startswith(jail.rstrip("/") + "/"):
            raise MissingMedia(
                f"symlink in the release leads outside the subset folder: {rel}", UNSAFE_MEMBER
            )
    return path


def read_location(location: LocalLocation, what: str, *, fs: AbstractFileSystem | None = None) -> bytes:
    """The bytes of a file or tar member read in place; MissingMedia when they cannot be read whole. Errors
    name ``what`` (a file) or the tar; ``fs`` is the filesystem of ``location`` (default: from its path)."""
    if fs is None:
        fs, path = url_to_fs(location.path)
    else:
        path = _path_of(fs, location.path)
    if location.offset is not None:
        what = path.rsplit("/", 1)[-1]
    try:
        if location.offset is None:
            data: bytes = fs.cat_file(path)
            return data
        with fs.open(path, "rb") as f:
            size = real_size(f)  # no read past what the file holds, whatever its header claimed
            claimed = location.offset + (location.size or 0)
            if location.offset > size or claimed > size:
                raise MissingMedia(
                    f"tar member truncated in {what}: claims bytes {location.offset}-{claimed}, the file "
                    f"holds {size}",
                    TRUNCATED,
                )
            f.seek(location.offset)
            data = f.read(location.size if location.size is not None else size - location.offset)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        raise MissingMedia(f"cannot read {what}: {_os_error_text(exc)}") from None
    except OSError as exc:
        raise MissingMedia(f"cannot read {what}: {_os_error_text(exc)}", SOURCE_ERROR) from None
    if location.size is not None and len(data) != location.size:
        raise MissingMedia(f"tar member truncated in {what}", TRUNCATED)
    return data


def _unicode_twin(fs: AbstractFileSystem, base: str, sub: str) -> str | None:
    """The file under ``base`` whose path equals ``sub`` in NFC, component by component (a folder listing
    only where the exact name is absent), or None. Two names alike in NFC, neither exact: MissingMedia."""
    here = base
    for part in sub.split("/"):
        exact = f"{here}/{part}"
        if _exists(fs, exact):
            here = exact
            continue
        try:
            names = sorted(str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(here, detail=False))
        except (OSError, ValueError):
            return None
        alike = [n for n in names if nfc(n) == nfc(part)]
        if len(alike) > 1:
            raise MissingMedia(
                f"ambiguous: {sub}: {len(alike)} names in {here.rsplit('/', 1)[-1] or here} match it in "
                f"Unicode NFC ({', '.join(ascii(n) for n in alike)})"
            )
        if not alike:
            return None
        here = f"{here}/{alike[0]}"
    return here if _isfile(fs, here) else None


def _exists(fs: AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.exists(path))
    except (OSError, ValueError):
        return False


def _os_error_text(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return f"permission denied ({exc.strerror or exc})"
    return f"{type(exc).__name__}: {exc.strerror or exc}"


def _isfile(fs: AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except (OSError, ValueError):
        return False


def _path_of(fs: AbstractFileSystem, url: str) -> str:
    """A catalog path (plain when local, a URL such as ``s3://b/k`` otherwise) as a path of ``fs``."""
    return str(fs._strip_protocol(url)) if "://" in url else url
