"""Every published media part of the samples read back, decoded as the trainer decodes it.

Energon's loader decodes an image part when a sample is cooked, but a video only when the trainer asks for
frames, and the run's read-back reads a few samples only. :func:`media_problems` walks the dataset's tars
and hands each media member of the samples read to :func:`vlmforge.tasks.media.trainer_decode.part_problem`:
the same definition the media stage applied to the bytes it kept, so the run, its read-back and
``vlmforge validate`` cannot disagree on a file. A kept video is decoded at the ``frame_indices`` its content
part names (the frames the tokens were counted for).
"""

from __future__ import annotations

import io
import json
import sqlite3
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..media import PART_CHECKS, part_problem
from ..publish import INDEX_SQLITE, META

__all__ = ["media_problems"]


def _frame_indices(record: Any) -> dict[str, list[int]]:
    """Tar part name -> ``frame_indices`` of every content part in a sample's json that names both."""
    found: dict[str, list[int]] = {}
    stack = [record]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            part, indices = node.get("part"), node.get("frame_indices")
            if isinstance(part, str) and isinstance(indices, list):
                found[part] = [i for i in indices if isinstance(i, int)]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _parts(tar: tarfile.TarFile, keys: set[str]) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, part name -> bytes) of the samples of ``tar`` whose key is in ``keys`` (members of a sample
    are adjacent, as webdataset groups them)."""
    current: str | None = None
    parts: dict[str, bytes] = {}
    for member in tar:
        if not member.isfile():
            continue
        base = member.name.rsplit("/", 1)[-1]
        key, dot, part = base.partition(".")
        if not dot or key not in keys:
            continue
        if key != current:
            if current is not None:
                yield current, parts
            current, parts = key, {}
        handle = tar.extractfile(member)
        parts[part] = handle.read() if handle is not None else b""
    if current is not None:
        yield current, parts


def _located(path: Path, keys: set[str]) -> list[tuple[str, int, int]]:
    """(shard, byte offset, byte size) of each key in ``index.sqlite``, in shard and offset order; shards
    are numbered in ``.info.json`` order, as Energon numbers them. Empty when the index cannot be read (the
    index checks report that)."""
    meta = path / META
    try:
        names = list(json.loads((meta / ".info.json").read_text(encoding="utf-8"))["shard_counts"])
        with sqlite3.connect(f"file:{meta / INDEX_SQLITE}?mode=ro", uri=True) as con:
            con.execute("CREATE TEMP TABLE wanted (key TEXT PRIMARY KEY)")
            con.executemany("INSERT INTO wanted VALUES (?)", [(k,) for k in keys])
            rows = con.execute(
                "SELECT tar_file_id, byte_offset, byte_size FROM samples JOIN wanted ON sample_key = key "
                "ORDER BY tar_file_id, byte_offset"
            ).fetchall()
        return [(names[tar_id], offset, size) for tar_id, offset, size in rows]
    except (OSError, KeyError, ValueError, IndexError, sqlite3.Error):
        return []


def _samples(path: Path, shards: list[str], keys: set[str]) -> Iterator[tuple[str, dict[str, bytes]]]:
    """The samples ``keys`` with their parts: read at the index's offsets, the rest by walking ``shards``."""
    found: set[str] = set()
    for shard, offset, size in _located(path, keys):
        with (path / shard).open("rb") as handle:
            handle.seek(offset)
            piece = handle.read(size)
        with tarfile.open(fileobj=io.BytesIO(piece), mode="r:") as tar:
            for key, parts in _parts(tar, keys):
                found.add(key)
                yield key, parts
    missing = keys - found
    for shard in shards if missing else ():
        tar_path = path / shard
        if tar_path.is_file():  # the index checks report missing shards
            with tarfile.open(tar_path, "r:") as tar:
                yield from _parts(tar, missing)


def media_problems(path: Path, shards: list[str], keys: set[str]) -> list[str]:
    """``<key>.<part>: <code> (<detail>)`` for every media part of the samples ``keys`` (in the tars
    ``shards`` of the dataset at ``path``) that does not decode as the trainer decodes it."""
    problems: list[str] = []
    for key, parts in _samples(Path(path), shards, keys):
        try:
            indices = _frame_indices(json.loads(parts["json"])) if "json" in parts else {}
        except ValueError:
            indices = {}
        for name, data in sorted(parts.items()):
            if name.rsplit(".", 1)[-1].lower() not in PART_CHECKS:
                continue
            problem = part_problem(name, data, indices.get(name))
            if problem is not None:
                detail = f" ({problem.detail})" if problem.detail else ""
                problems.append(f"{key}.{name}: {problem.reason}{detail}")
    return problems
