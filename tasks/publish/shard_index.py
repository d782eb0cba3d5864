"""One shard's index as megatron-energon's prepare records it: its rows for ``index.sqlite`` and ``.tar.idx``.

Energon's prepare reads every member header of every shard with :mod:`tarfile` to learn what the shard
writer already knew when it wrote them. :func:`index_members` makes the same rows from the members (name,
header offset, data offset, size), however they are known: recorded by :class:`~.tar.TarOut` as it writes a
shard, or read back with :func:`~.tar.tar_members` for a shard kept from an interrupted attempt. The member
names are split into sample key and part with Energon's own regular expressions, in Energon's order, so a
``samples`` row is (shard id, key, sample index, byte offset, byte size) and a ``sample_parts`` row (shard
id, sample index, part, data offset, data size) exactly as Energon's scan yields them
(``tests/publish/test_shard_index.py`` compares both with Energon's prepare on every layout the writer makes).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .samples import EnergonPrepareError
from .tar import TarMember

__all__ = ["ShardIndex", "index_members", "write_tar_index"]

SampleRow = tuple[int, str, int, int, int]
PartRow = tuple[int, int, str, int, int]


@dataclass
class ShardIndex:
    """A shard's rows for Energon's ``samples`` and ``sample_parts`` tables, and its ``.tar.idx`` offsets
    (each sample's first header, then the end of the last sample)."""

    tar_id: int
    samples: list[SampleRow] = field(default_factory=list)
    parts: list[PartRow] = field(default_factory=list)
    offsets: array = field(default_factory=lambda: array("Q"))


def index_members(tar_id: int, members: Iterable[TarMember]) -> ShardIndex:
    """The index of shard ``tar_id`` from its regular members in file order (what Energon's scan yields).

    As Energon's scan: members whose name marks metadata (``__...__``) or has no ``key.part`` form are
    skipped; consecutive members with one key form one sample. Raises :class:`EnergonPrepareError` for a
    shard without a sample (Energon's prepare refuses one)."""
    skip_meta_re, split_name_re = _energon_names()
    index = ShardIndex(tar_id)
    samples, parts, offsets = index.samples, index.parts, index.offsets
    last_key: str | None = None
    start = end = 0
    for name, offset, offset_data, size in members:
        end = offset_data + -(-size // 512) * 512
        if skip_meta_re.match(name) or (match := split_name_re.match(name)) is None:
            continue
        key, part = match.group(1), match.group(2)
        if key != last_key:
            if last_key is not None:
                samples.append((tar_id, last_key, len(samples), start, offset - start))
            offsets.append(offset)
            last_key, start = key, offset
        parts.append((tar_id, len(samples), part, offset_data, size))
    if last_key is None:
        raise EnergonPrepareError(f"shard {tar_id} has no samples")
    samples.append((tar_id, last_key, len(samples), start, end - start))
    offsets.append(end)
    return index


@functools.cache
def _energon_names() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Energon's patterns of a metadata member and of ``<key>.<part>``, imported when first needed: Energon
    imports torch, which the driver (it imports the publish stage's functions) must not load (~0.2 GB)."""
    from megatron.energon.flavors.webdataset.config import skip_meta_re, split_name_re

    return skip_meta_re, split_name_re


def write_tar_index(shard: Path, offsets: array) -> None:
    """The shard's ``.tar.idx`` as Energon's ``TarIndexWriter`` writes it: native uint64 offsets, written to
    ``.tar.idx.tmp`` and renamed into place, readable and writable by the shard's owner."""
    from megatron.energon.flavors.webdataset.itar import ITAR_SUFFIX

    final = shard.with_suffix(ITAR_SUFFIX)
    tmp = shard.with_suffix(ITAR_SUFFIX + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(offsets.tobytes())
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    os.replace(tmp, final)
    with contextlib.suppress(OSError):
        os.chmod(final, shard.stat().st_mode | 0o600)
