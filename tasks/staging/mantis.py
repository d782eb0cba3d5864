"""TIGER-Lab/Mantis-Instruct: one folder per config (``nlvr2``, ``spot-the-diff``...).

Each config holds Parquet rows ``id``, ``images: [{bytes, path}]``, ``conversation: [{role, content}]`` (one
``<image>`` per image) and the images in ``train_images.zip`` / ``val_images.zip`` beside them. Only the
members the rows reference are read, through the zip's central directory and coalesced ranged reads, so an
unreferenced image costs nothing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator
from typing import Any

from fsspec import AbstractFileSystem

from ..archives import (
    FsRangeSource,
    ZipEntry,
    ZipIndex,
    check_zip_entry,
    normalize_member,
    plan_ranges,
    read_zip_group,
    read_zip_index,
)
from ..http import FetchError
from .common import (
    MAX_MEDIA_BYTES,
    LayoutConfig,
    Stager,
    UnreadableRows,
    dirs,
    files,
    image_ext,
    jsonable,
    member_candidates,
    parquet_rows,
    staged_line,
    unreadable_line,
)

_COLUMNS = ("id", "images", "conversation", "conversations")


class MantisLayout:
    name = "mantis"

    def configs(self, fs: AbstractFileSystem, root: str) -> list[LayoutConfig]:
        out: list[LayoutConfig] = []
        for folder in dirs(fs, root):
            parquet = files(fs, folder, ".parquet")
            if parquet:
                name = folder.rsplit("/", 1)[-1]
                zips = sorted(
                    files(fs, folder, ".zip"), key=lambda p: (not p.endswith("train_images.zip"), p)
                )
                out.append(LayoutConfig(name, name, tuple(parquet), tuple(zips), folder))
        return out

    def lines(self, fs: AbstractFileSystem, cfg: LayoutConfig, stager: Stager) -> Iterator[bytes]:
        zips = _ZipMembers(fs, cfg.archives, cfg.name, stager)
        for path in cfg.rows_files:
            try:
                rows = list(parquet_rows(fs, path, _COLUMNS))
            except UnreadableRows as exc:  # the file's own reject; the other files are staged
                yield unreadable_line(path, str(exc), stager)
                continue
            stager.stats.rows += len(rows)
            zips.resolve(_zip_paths(rows))  # this file's members, in one pass of coalesced ranged reads
            for row in rows:
                yield _row_line(row, zips, stager)


def _zip_paths(rows: list[dict[str, Any]]) -> Iterator[str]:
    """The image paths of ``rows`` that are not embedded (to be read from the zips)."""
    for row in rows:
        images = row.get("images")
        if isinstance(images, list):
            for img in images:
                if isinstance(img, dict) and img.get("bytes") is None and isinstance(img.get("path"), str):
                    yield img["path"]


def _row_line(row: dict[str, Any], zips: _ZipMembers, stager: Stager) -> bytes:
    images = row.get("images")
    refs: Any = images
    if isinstance(images, list):
        refs = []
        for k, img in enumerate(images):
            stager.stats.media_refs += 1
            refs.append(_image_ref(img, row, k, zips, stager))
    rec = {k: jsonable(v) for k, v in row.items() if k != "images"}
    rec["images"] = jsonable(refs)
    return staged_line(rec)


def _image_ref(img: Any, row: dict[str, Any], k: int, zips: _ZipMembers, stager: Stager) -> Any:
    if isinstance(img, str):
        img = {"path": img, "bytes": None}
    if not isinstance(img, dict):
        return jsonable(img)  # the parser rejects it with the field named
    data, path = img.get("bytes"), img.get("path")
    if isinstance(data, bytes) and data:
        name = path if isinstance(path, str) and path else f"{row.get('id', 'row')}_{k}.{image_ext(data)}"
        return stager.put(data, name, embedded=True)
    if isinstance(path, str) and path:
        ref = zips.resolved.get(path)
        if ref is None:
            stager.stats.unresolved += 1
            return path
        return ref
    return jsonable(img)


class _ZipMembers:
    """The zips of a Mantis config: central directories read once, members read by coalesced ranges."""

    def __init__(self, fs: AbstractFileSystem, paths: tuple[str, ...], config: str, stager: Stager) -> None:
        self.stager = stager
        self.config = config
        self.zips: list[tuple[str, FsRangeSource, ZipIndex, dict[str, list[str]]]] = []
        for path in paths:
            label = posixpath.basename(path)
            source = FsRangeSource(fs, path, label=label)
            try:
                index = read_zip_index(source)
            except (FetchError, OSError) as exc:
                stager.problem(f"{label}: {exc}")
                continue
            by_base: dict[str, list[str]] = {}
            for name in index.entries:
                by_base.setdefault(posixpath.basename(name), []).append(name)
            self.zips.append((label, source, index, by_base))
        self.resolved: dict[str, str | None] = {}

    def _find(self, path: str) -> tuple[int, ZipEntry] | None:
        for i, (label, _, index, by_base) in enumerate(self.zips):
            stem = label.rsplit(".", 1)[0]
            for cand in member_candidates(path, self.config, stem):
                entry = index.entries.get(cand)
                if entry is not None and not entry.is_dir:
                    return i, entry
            same = by_base.get(posixpath.basename(normalize_member(path)), [])
            if len(same) == 1:  # a unique file name: the folder inside the zip differs from the row's
                return i, index.entries[same[0]]
        return None

    def resolve(self, paths: Iterable[str]) -> None:
        """Read the members of ``paths`` not resolved yet (neighbours in one ranged read)."""
        for i, entries in self._plan(paths).items():
            self._read(i, entries)

    def _plan(self, paths: Iterable[str]) -> dict[int, dict[int, tuple[ZipEntry, list[str]]]]:
        """zip -> header offset -> (entry, the paths it answers) for every path found and not read yet."""
        todo: dict[int, dict[int, tuple[ZipEntry, list[str]]]] = {}
        for path in dict.fromkeys(paths):
            if path in self.resolved:
                continue
            hit = self._find(path)
            if hit is None:
                self.resolved[path] = None
                continue
            i, entry = hit
            bad = check_zip_entry(entry, entry.name, MAX_MEDIA_BYTES, self.zips[i][0])
            if bad is not None:
                self.stager.problem(str(bad))
                self.resolved[path] = None
                continue
            todo.setdefault(i, {}).setdefault(entry.header_offset, (entry, []))[1].append(path)
        return todo

    def _read(self, i: int, entries: dict[int, tuple[ZipEntry, list[str]]]) -> None:
        label, source, index, _ = self.zips[i]
        before = source.bytes_read
        for group in plan_ranges([e for e, _ in entries.values()]):
            try:
                results = list(read_zip_group(source, index, group))
            except (FetchError, OSError) as exc:
                results = [(e, FetchError("bad_archive", str(exc), url=label)) for e in group]
            for entry, data in results:
                for path in entries[entry.header_offset][1]:
                    if isinstance(data, bytes):
                        self.resolved[path] = self.stager.put(data, path, embedded=False)
                    else:
                        self.stager.problem(f"{label}: {data}")
                        self.resolved[path] = None
        self.stager.stats.archive_bytes_read += source.bytes_read - before
