"""The internal record every input format is normalised to, and the catalog entry of a subset.

Parts are plain dicts (``{"type": "text", "text": ...}``, ``{"type": "image", "ref": ...}``,
``{"type": "video", "ref": ...}``) rather than models: parsing 6.9M rows must stay cheap, and the parser in
``tasks/parse.py`` is the one place that builds them, so their shape is checked there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Part = dict[str, Any]
Message = dict[str, Any]  # {"role": str, "content": list[Part]}


@dataclass(frozen=True, slots=True)
class MediaRef:
    index: int  # position among the sample's media parts (0-based, order of appearance)
    kind: Literal["image", "video"]
    ref: str


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed sample: normalised messages plus its media references in order of appearance."""

    sample_id: str
    line: int
    messages: list[Message]
    media: tuple[MediaRef, ...]


@dataclass(frozen=True, slots=True)
class Reject:
    """A line that could not become a Record; ``reason`` is a code, a colon, then a readable detail."""

    line: int
    reason: str
    sample_id: str | None = None


@dataclass(frozen=True, slots=True)
class SubsetEntry:
    """What the catalog knows of one subset before any media work."""

    subset: str
    path: str  # subset folder, as an fsspec path
    jsonl: str
    readme_sha256: str | None
    jsonl_sha256: str
    jsonl_bytes: int
    rows: int
    license: str
    license_text: str | None
    media_tars: tuple[str, ...] = ()
    # Byte offsets where each batch of ``batch_lines`` lines starts, plus the file size at the end:
    # batch i covers [offsets[i], offsets[i+1]) and starts at line i * batch_lines + 1.
    batch_offsets: tuple[int, ...] = field(default_factory=tuple)
