"""What the shard writer takes and gives back: samples with their media, and the shards it wrote.

A :class:`ShardSample` is one sample as the publish stage hands it over (key, split, the vlmforge record,
media parts in order of appearance); a sample format (:mod:`.formats`) turns it into tar members. A
:class:`MediaPart` may stand for bytes not read yet: its size and sha256 identify it in the resume journal,
so a finished shard is kept without reading its media.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...schemas.sample_keys import SPLITS, Split

__all__ = [
    "SPLITS",
    "DatasetResult",
    "DuplicateKeyError",
    "EnergonPrepareError",
    "MediaPart",
    "ShardInfo",
    "ShardSample",
    "Split",
]


class DuplicateKeyError(ValueError):
    """A sample key occurs twice in one dataset (Energon requires dataset-wide unique keys)."""


class EnergonPrepareError(RuntimeError):
    """megatron-energon's prepare failed (it calls ``sys.exit`` on duplicate keys) or disagrees with us."""


@dataclass(frozen=True)
class MediaPart:
    """A media part whose bytes are read only when its shard is written.

    ``size`` and ``sha256`` describe the bytes ``load()`` returns (a mismatch in size aborts the write);
    they identify the part in the resume journal, so a finished shard is kept without reading its media.
    """

    name: str
    size: int
    sha256: str
    load: Callable[[], bytes] = field(repr=False, compare=False)

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> MediaPart:
        payload = bytes(data)
        return cls(
            name=name, size=len(payload), sha256=hashlib.sha256(payload).hexdigest(), load=lambda: payload
        )


@dataclass(frozen=True)
class ShardSample:
    """One sample to write. ``key`` must already be sanitised (no dots); ``media`` parts are ``(name, bytes)``
    pairs or :class:`MediaPart`, in order of appearance (``0.jpg``, ``1.png``, ``2.mp4``, ...)."""

    key: str
    split: Split
    json: dict[str, Any]
    media: tuple[tuple[str, bytes] | MediaPart, ...] = ()
    #: ``json`` as compact sorted JSON when the caller holds it already (the ``records`` part's text)
    text: str | None = None


@dataclass(frozen=True)
class ShardInfo:
    shard: str
    split: Split
    samples: int
    bytes: int
    sha256: str
    #: Sum of ``json.vlmforge.total_tokens`` over the shard's samples (None when a sample has none).
    tokens: int | None = None


@dataclass
class DatasetResult:
    path: Path
    shards: list[ShardInfo] = field(default_factory=list)
    samples: int = 0
    #: Shards kept from an interrupted earlier write (same samples, so the same bytes) instead of rewritten.
    reused_shards: int = 0

    def split_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for shard in self.shards:
            counts[shard.split] = counts.get(shard.split, 0) + shard.samples
        return counts
