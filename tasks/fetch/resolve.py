"""Resolve a sample's media reference to bytes.

Order (first hit wins): each user media root, ``<subset>/<ref>``, ``<subset>/media/<ref>``, then members of
the subset's ``media/shard_*.tar`` matched by normalised path. The subset folder and its tars may live on any
fsspec filesystem (the catalog gives them as URLs; the release's ``storage_options`` come along).
Tar members are read by offset, so a batch pulls only the members it references; symlink, hardlink and
device members are never followed, and tar headers are read with bounded memory (``SafeTarInfo``).

Symlinks: a media root is the user's own folder and its symlinks are followed. A symlink inside the release
(the subset folder, ``media/``) is followed only while its target stays inside the subset folder: a release
nobody here controls must not be able to pull ``/etc/passwd`` or ``~/.aws/credentials`` into a shard. An
unreadable or corrupt media tar makes its members unavailable (``MissingMedia`` naming the tar), never an
exception that stops the batch.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from ..parse.records import normalize_ref, unsafe_ref_reason
from ..storage import is_local, url_to_fs
from .archives import open_tar_stream


class MissingMedia(Exception):
    """No location holds the reference."""


@dataclass(frozen=True, slots=True)
class Resolved:
    source: str  # media_root | subset | media | tar:<file name>
    data: bytes


@dataclass(frozen=True, slots=True)
class _Member:
    tar: str
    offset: int
    size: int


class MediaResolver:
    """Resolves references of one subset; reuse it for a whole batch (tar indexes are cached)."""

    def __init__(
        self,
        subset_path: str,
        media_tars: tuple[str, ...] = (),
        media_roots: tuple[str, ...] = (),
        *,
        storage_options: Mapping[str, Any] | None = None,
    ):
        # The release's storage options (s3 endpoint, ...) apply to the subset folder and its tars; media
        # roots are the user's own locations and open with fsspec's defaults.
        self.fs, self.subset_path = url_to_fs(subset_path, **dict(storage_options or {}))
        self.roots = [url_to_fs(r) for r in media_roots]
        self.media_tars = media_tars
        self._tar_index: dict[str, _Member] | None = None
        self._tar_errors: list[str] = []
        self._jail = os.path.realpath(self.subset_path) if is_local(self.fs) else None

    def resolve(self, ref: str) -> Resolved:
        bad = unsafe_ref_reason(ref)
        if bad:  # the parser rejects these first; checked again because this function reads files
            raise MissingMedia(f"unsafe reference ({bad})")
        rel = normalize_ref(ref)
        for fs, root in self.roots:
            hit = _read_file(fs, root, rel)
            if hit is not None:
                return Resolved("media_root", hit)
        for folder, source in ((self.subset_path, "subset"), (f"{self.subset_path}/media", "media")):
            hit = _read_file(self.fs, folder, rel, jail=self._jail)
            if hit is not None:
                return Resolved(source, hit)
        member = self._tars().get(rel)
        if member is not None:
            name = member.tar.rsplit("/", 1)[-1]
            try:
                with self.fs.open(_path_of(self.fs, member.tar), "rb") as f:
                    f.seek(member.offset)
                    data = f.read(member.size)
            except OSError as exc:
                raise MissingMedia(f"cannot read {name}: {type(exc).__name__}: {exc}") from None
            if len(data) != member.size:
                raise MissingMedia(f"tar member truncated in {name}")
            return Resolved(f"tar:{name}", data)
        unreadable = f"; unreadable media tar(s): {'; '.join(self._tar_errors)}" if self._tar_errors else ""
        raise MissingMedia(f"not found in media roots, subset folder, media/ or media tars{unreadable}")

    def _tars(self) -> dict[str, _Member]:
        if self._tar_index is None:
            index: dict[str, _Member] = {}
            for tar_path in self.media_tars:
                try:
                    with (
                        self.fs.open(_path_of(self.fs, tar_path), "rb") as f,
                        open_tar_stream(f, "r|") as tf,
                    ):
                        for m in tf:
                            if not m.isreg():  # symlinks, hardlinks, devices: never followed
                                continue
                            name = normalize_ref(m.name)
                            if unsafe_ref_reason(m.name) or name.startswith("../"):
                                continue  # tar-slip members are never served
                            index.setdefault(name, _Member(tar_path, m.offset_data, m.size))
                except (tarfile.TarError, OSError, EOFError, zlib.error, RecursionError) as exc:
                    # members indexed before the damage stay available; the rest are reported missing
                    detail = " ".join(str(exc).split())[:200] or type(exc).__name__
                    self._tar_errors.append(f"{tar_path.rsplit('/', 1)[-1]}: {detail}")
            self._tar_index = index
        return self._tar_index


def _path_of(fs: AbstractFileSystem, url: str) -> str:
    """A catalog path (plain when local, a URL such as ``s3://b/k`` otherwise) as a path of ``fs``."""
    return str(fs._strip_protocol(url)) if "://" in url else url


def _read_file(fs: AbstractFileSystem, folder: str, rel: str, *, jail: str | None = None) -> bytes | None:
    """The bytes of ``folder/rel``, or None when there is no such file. With ``jail`` (a local real path),
    a file whose real path (symlinks resolved) leaves ``jail`` is refused with MissingMedia."""
    path = posixpath.normpath(f"{folder}/{rel}")
    if not path.startswith(folder.rstrip("/") + "/"):
        return None
    try:
        if not fs.isfile(path):
            return None
        if jail is not None:
            real = os.path.realpath(path)
            if real != jail and not real.startswith(jail.rstrip("/") + "/"):
                raise MissingMedia(
                    f"unsafe reference (symlink in the release leads outside the subset folder: {rel})"
                )
        data: bytes = fs.cat_file(path)
        return data
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except PermissionError as exc:
        raise MissingMedia(f"cannot read {rel}: permission denied ({exc.strerror or exc})") from None
    except OSError as exc:
        raise MissingMedia(f"cannot read {rel}: {type(exc).__name__}: {exc.strerror or exc}") from None
