"""Resolve a sample's media reference to bytes.

Order (first hit wins): each user media root, ``<subset>/<ref>``, ``<subset>/media/<ref>``, then members of
the subset's ``media/shard_*.tar`` matched by normalised path. The subset folder and its tars may live on any
fsspec filesystem (the catalog gives them as URLs; the release's ``storage_options`` come along).
Tar members are read by offset, so a batch pulls only the members it references; symlink, hardlink and
device members are never followed.
"""

from __future__ import annotations

import posixpath
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from vlmforge.tasks.parse import normalize_ref, unsafe_ref_reason
from vlmforge.tasks.storage import url_to_fs


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
            hit = _read_file(self.fs, folder, rel)
            if hit is not None:
                return Resolved(source, hit)
        member = self._tars().get(rel)
        if member is not None:
            with self.fs.open(_path_of(self.fs, member.tar), "rb") as f:
                f.seek(member.offset)
                data = f.read(member.size)
            if len(data) != member.size:
                raise MissingMedia(f"tar member truncated in {member.tar.rsplit('/', 1)[-1]}")
            return Resolved(f"tar:{member.tar.rsplit('/', 1)[-1]}", data)
        raise MissingMedia("not found in media roots, subset folder, media/ or media tars")

    def _tars(self) -> dict[str, _Member]:
        if self._tar_index is None:
            index: dict[str, _Member] = {}
            for tar_path in self.media_tars:
                with (
                    self.fs.open(_path_of(self.fs, tar_path), "rb") as f,
                    tarfile.open(fileobj=f, mode="r|") as tf,
                ):
                    for m in tf:
                        if not m.isreg():  # symlinks, hardlinks, devices: never followed
                            continue
                        name = normalize_ref(m.name)
                        if unsafe_ref_reason(m.name) or name.startswith("../"):
                            continue  # tar-slip members are never served
                        index.setdefault(name, _Member(tar_path, m.offset_data, m.size))
            self._tar_index = index
        return self._tar_index


def _path_of(fs: AbstractFileSystem, url: str) -> str:
    """A catalog path (plain when local, a URL such as ``s3://b/k`` otherwise) as a path of ``fs``."""
    return str(fs._strip_protocol(url)) if "://" in url else url


def _read_file(fs: AbstractFileSystem, folder: str, rel: str) -> bytes | None:
    path = posixpath.normpath(f"{folder}/{rel}")
    if not path.startswith(folder.rstrip("/") + "/"):
        return None
    try:
        if not fs.isfile(path):
            return None
        data: bytes = fs.cat_file(path)
        return data
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
