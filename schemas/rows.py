"""Typed rows of the ``samples`` and ``media`` manifests: a field of :class:`SampleRow` / :class:`MediaRow` IS
a column, and the Parquet schemas (``schemas/manifests.py``) are derived from these classes.

Adding a manifest column is one field here plus the one stage that sets it, and a new ``PIPELINE_VERSION``
with the new :func:`manifest_fingerprint` beside it (``schemas/config.py``; a test fails until both are).
The field order is the column order; the annotation gives the Arrow type (``str`` string, ``int`` int64,
``float`` float64, ``bool``, ``list[...]``; :data:`Int32` where the column is 32-bit) and ``| None`` makes the
column nullable. A batch builds thousands of rows, so they are plain slotted dataclasses (no validation per
row): an unknown column is a ``TypeError`` when the row is made and an ``AttributeError`` when it is set.

MANIFEST BREAKING CHANGE rule: renaming or retyping a column breaks users' DuckDB queries and later runs'
resume; add fields at the end, never repurpose them. Column meanings are documented in README.md.
"""

from __future__ import annotations

import hashlib
import types
from dataclasses import dataclass, fields
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import pyarrow as pa

__all__ = ["Int32", "MediaRow", "SampleRow", "arrow_schema", "manifest_fingerprint"]

Int32 = Annotated[int, pa.int32()]

_ARROW: dict[Any, pa.DataType] = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


@dataclass(slots=True, kw_only=True)
class SampleRow:
    """One input line of a subset's JSONL, rejected and dropped lines included, so that
    rows in = ok + rejected + dropped holds for every subset."""

    subset: str
    sample_id: str | None = None  # null when the line could not be parsed
    line: int  # 1-based line number in <subset>.jsonl
    key: str | None = None  # Energon sample key, null unless ok
    status: str = "ok"  # ok | rejected | dropped
    reason: str | None = None  # why rejected/dropped; a dropped reason names its knob
    n_images: Int32 = 0
    n_videos: Int32 = 0
    text_tokens: int | None = None
    visual_tokens: int | None = None
    total_tokens: int | None = None
    split: str | None = None  # train | val, null unless ok
    shard: str | None = None  # filled when the subset is published
    # Added columns (never repurpose the ones above).
    id_conflict_of: int | None = None  # an earlier line with the same id and other content
    truncated_tokens: int | None = None  # --seq-len-mode truncate: text tokens cut
    # visual tokens as the trainer's per-sample check counts them (Bridge's encode_sample: max_visual_tokens);
    # visual_tokens / total_tokens are what its batch path feeds the model (equal unless --trainer bridge-*)
    encode_check_visual_tokens: int | None = None


@dataclass(slots=True, kw_only=True)
class MediaRow:
    """One media reference of a parsed sample (a sample rejected at parse time has none)."""

    subset: str
    sample_id: str
    line: int
    index: Int32  # position among the sample's media parts
    ref: str
    kind: str  # image | video
    status: str = "ok"  # ok | rejected
    reason: str | None = None
    source: str | None = None  # where the reference resolved: media_root | subset | media | tar:<name>
    sha256: str | None = None  # of the upstream bytes
    bytes: int | None = None  # upstream size
    format: str | None = None
    width: Int32 | None = None  # as displayed (EXIF orientation / rotation applied)
    height: Int32 | None = None
    out_sha256: str | None = None  # bytes written to shards (== sha256 when kept)
    out_bytes: int | None = None
    out_ext: str | None = None
    out_width: Int32 | None = None
    out_height: Int32 | None = None
    kept_original: bool | None = None
    notes: str | None = None
    frames: Int32 | None = None  # video: frames in the file
    fps: float | None = None
    sampled_frames: Int32 | None = None  # video: frames the model's sampler takes
    visual_tokens: int | None = None
    # Added columns: the fetch stage's outcome (null when the reference resolved locally, no recipe).
    upstream: str | None = None  # where the bytes came from (URL, s3://, archive URL#member, path)
    fetch_status: str | None = None  # ok | a failure class (tasks/http/failures.py)
    fetch_detail: str | None = None  # what failed, readable
    frame_indices: list[Int32] | None = None  # video: the frames the token count assumes
    # --video-mode frames: one stored image per sampled frame (out_sha256 names their list object).
    frame_sha256: list[str] | None = None
    frame_bytes: list[int] | None = None
    # image: frames or pages in the file (animated GIF/WebP/APNG, multi-page TIFF, MPO: only the first is
    # published, as the trainer's Image.open gives it); video: the frames sampled. Null for rejects.
    n_frames: Int32 | None = None
    # visual tokens as the trainer's per-sample check counts them (the processor on the stored pixels);
    # visual_tokens is what its batch path feeds the model (equal unless --trainer bridge-*)
    encode_check_visual_tokens: int | None = None


def _arrow_type(annotation: Any) -> pa.DataType:
    if get_origin(annotation) is Annotated:
        return get_args(annotation)[1]
    if get_origin(annotation) is list:
        return pa.list_(_arrow_type(get_args(annotation)[0]))
    return _ARROW[annotation]


def _field(name: str, annotation: Any) -> pa.Field:
    if get_origin(annotation) in (Union, types.UnionType):
        (inner,) = (a for a in get_args(annotation) if a is not type(None))
        return pa.field(name, _arrow_type(inner))
    return pa.field(name, _arrow_type(annotation), nullable=False)


def arrow_schema(row_type: type) -> pa.Schema:
    """The Parquet schema of a row class: its fields in order, typed and nullable as annotated."""
    hints = get_type_hints(row_type, include_extras=True)
    return pa.schema([_field(f.name, hints[f.name]) for f in fields(row_type)])


def manifest_fingerprint(samples: type = SampleRow, media: type = MediaRow) -> str:
    """A short hash of the columns a batch writes (names, order, Arrow types, nullability of the samples and
    media manifests): what ``schemas/config.py`` records beside ``PIPELINE_VERSION``."""
    text = "\n".join(
        f"{table}.{f.name}: {f.type}{'' if f.nullable else ' not null'}"
        for table, row in (("samples", samples), ("media", media))
        for f in arrow_schema(row)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]
