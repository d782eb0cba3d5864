"""Every published media part of the samples read back, decoded as the trainer decodes it.

Energon's loader decodes an image part when a sample is cooked, but a video only when the trainer asks for
frames, and the run's read-back reads a few samples only. :func:`media_problems` walks the dataset's tars
and hands each media member of the samples read to :func:`vlmforge.tasks.media.trainer_decode.part_problem`:
the same definition the media stage applied to the bytes it kept, so the run, its read-back and
``vlmforge validate`` cannot disagree on a file. A kept video is decoded at the ``frame_indices`` its content
part names (the frames the tokens were counted for).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..media.trainer_decode import PART_CHECKS, part_problem

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


def _samples(tar_path: Path, keys: set[str]) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(key, part name -> bytes) of the samples of one tar whose key is in ``keys`` (members of a sample
    are adjacent, as webdataset groups them)."""
    current: str | None = None
    parts: dict[str, bytes] = {}
    with tarfile.open(tar_path, "r:") as tar:
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


def media_problems(path: Path, shards: list[str], keys: set[str]) -> list[str]:
    """``<key>.<part>: <code> (<detail>)`` for every media part of the samples ``keys`` (in the tars
    ``shards`` of the dataset at ``path``) that does not decode as the trainer decodes it."""
    problems: list[str] = []
    for shard in shards:
        tar_path = Path(path) / shard
        if not tar_path.is_file():
            continue  # the index checks report missing shards
        for key, parts in _samples(tar_path, keys):
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
