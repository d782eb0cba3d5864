"""Energon's prepare, with each shard's scan done by vlmforge's own tar header reader.

Energon's prepare reads every shard with :mod:`tarfile` in worker processes and streams what it finds (a
row per sample and per part, the ``.tar.idx`` offsets) to its aggregator, which writes ``index.sqlite``,
``.info.json`` and ``split.yaml``. The scan is what costs: 3.4 s of CPU per 10,000-sample text shard, the
largest part of a 200,000-row publish. Our shards are the GNU tars :class:`~.tar.TarOut` writes, so
:func:`~.tar.tar_members` reads their headers with no ``TarInfo`` objects and :func:`scan_shard` yields
Energon's own item types, in Energon's order, from it: 0.8 s for the same shard. Everything else (pool,
aggregator, sqlite writer, info and split files) stays Energon's. A shard the reader refuses (a layout we
did not write) goes to Energon's own scan, so its verdict is Energon's. ``tests/publish/test_shard_scan.py``
checks that both scans give the same items and the same ``.tar.idx`` bytes on every layout the writer makes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from megatron.energon.epathlib import EPath
from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re
from megatron.energon.flavors.webdataset.itar import ITAR_SUFFIX
from megatron.energon.flavors.webdataset.prepare import (
    IndexSample,
    IndexSamplePart,
    IndexShardInfo,
    WebdatasetPreparator,
)
from megatron.energon.flavors.webdataset.structs import ShardInfo

from .samples import EnergonPrepareError
from .tar import TarMember, tar_members

__all__ = ["OwnTarPreparator", "scan_shard"]

log = logging.getLogger(__name__)


def scan_shard(
    path: str,
    shard_to_idx: dict[str, int],
    parent_path: EPath,
    max_parts: int,
    media_filter: Any = None,
) -> Iterator[Any]:
    """What ``WebdatasetPreparator._preprocess_tar`` yields for the shard ``path`` (same signature)."""
    shard_path = parent_path / path
    members = _read_members(shard_path) if media_filter is None else None
    if members is None:  # media metadata wanted, or not a tar we wrote: Energon's own scan
        yield from WebdatasetPreparator._preprocess_tar(
            path, shard_to_idx, parent_path, max_parts, media_filter
        )
        return
    try:
        yield from _indexed(path, shard_to_idx[path], shard_path, members, max_parts)
    except BaseException:  # as Energon's scan does: its workers must always report back to the aggregator
        log.exception("Shard failed to load: %r. Skipping it.", path)
        yield IndexShardInfo(shard_info=ShardInfo(name=path, path=shard_path, count=0), parts=set())


def _indexed(
    path: str, tar_id: int, shard_path: EPath, members: list[TarMember], max_parts: int
) -> Iterator[Any]:
    """Energon's items for one shard, in Energon's order, and its ``.tar.idx`` (written as they go)."""
    count, parts = 0, set[str]()
    with _TarIndex(Path(str(shard_path.local_path()))) as index:
        last_base = None
        pending: dict[str, Any] | None = None
        for member in members:
            if skip_meta_re.match(member.name) or (match := split_name_re.match(member.name)) is None:
                continue
            base, part = match.group(1), match.group(2)
            if len(parts) < max_parts:
                parts.add(part)
            if base != last_base:
                index.append(member.offset)
                if pending is not None:
                    yield IndexSample(**pending, byte_size=member.offset - pending["byte_offset"])
                pending = dict(
                    tar_file_id=tar_id, sample_key=base, sample_index=count, byte_offset=member.offset
                )
                last_base, count = base, count + 1
            yield IndexSamplePart(
                tar_file_id=tar_id,
                sample_index=count - 1,
                part_name=part,
                content_byte_offset=member.offset_data,
                content_byte_size=member.size,
            )
        end = members[-1].end if members else 0
        index.append(end)
        if pending is not None:
            yield IndexSample(**pending, byte_size=end - pending["byte_offset"])
    yield IndexShardInfo(shard_info=ShardInfo(name=path, path=shard_path, count=count), parts=parts)


class _TarIndex:
    """The shard's ``.tar.idx`` as Energon's ``TarIndexWriter`` writes it (native uint64 sample offsets in
    ``.tar.idx.tmp``, renamed to ``.tar.idx`` on success with the owner's read-write added to the tar's mode,
    removed on failure), but in one write: Energon's writer makes a multistorageclient call per sample, each
    wrapped in its telemetry bookkeeping (8% of a 200,000-row publish's profile)."""

    def __init__(self, shard: Path) -> None:
        self.shard = shard
        self.final = shard.with_suffix(ITAR_SUFFIX)
        self.tmp = shard.with_suffix(ITAR_SUFFIX + ".tmp")
        self.offsets = array("Q")
        # opened first, as Energon's writer does: an unwritable index fails before any item is yielded
        self.file = open(self.tmp, "wb")  # noqa: SIM115 - closed in __exit__

    def append(self, offset: int) -> None:
        self.offsets.append(offset)

    def __enter__(self) -> _TarIndex:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            if exc_type is None:
                self.file.write(self.offsets.tobytes())
        finally:
            self.file.close()
        if exc_type is not None:
            with contextlib.suppress(OSError):
                os.remove(self.tmp)
            return
        os.replace(self.tmp, self.final)
        with contextlib.suppress(OSError):  # as Energon: the index readable and writable by its owner
            os.chmod(self.final, self.shard.stat().st_mode | 0o600)


def _read_members(shard_path: EPath) -> list[TarMember] | None:
    try:
        return list(tar_members(Path(str(shard_path.local_path()))))
    except (EnergonPrepareError, OSError, ValueError):
        return None


class OwnTarPreparator(WebdatasetPreparator):
    """Energon's ``prepare_dataset`` with :func:`scan_shard` as its per-shard scan."""

    _preprocess_tar = staticmethod(scan_shard)
