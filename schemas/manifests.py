"""Manifest tables: the pipeline's system of record (Parquet, hive-partitioned by ``subset=``).

MANIFEST BREAKING CHANGE rule: renaming or retyping a column here breaks users' DuckDB queries and later
runs' resume; add columns, never repurpose them. Column meanings are documented in README.md.
"""

from __future__ import annotations

from typing import Final, Literal

import pyarrow as pa

SampleStatus = Literal["ok", "rejected", "dropped"]
SAMPLE_STATUSES: Final = ("ok", "rejected", "dropped")
MEDIA_KINDS: Final = ("image", "video")

# One row per input line of a subset's JSONL, rejected and dropped lines included, so that
# rows in = ok + rejected + dropped holds for every subset.
SAMPLES = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("sample_id", pa.string()),  # null when the line could not be parsed
        pa.field("line", pa.int64(), nullable=False),  # 1-based line number in <subset>.jsonl
        pa.field("key", pa.string()),  # Energon sample key, null unless ok
        pa.field("status", pa.string(), nullable=False),
        pa.field("reason", pa.string()),  # why rejected/dropped; a dropped reason names its knob
        pa.field("n_images", pa.int32(), nullable=False),
        pa.field("n_videos", pa.int32(), nullable=False),
        pa.field("text_tokens", pa.int64()),
        pa.field("visual_tokens", pa.int64()),
        pa.field("total_tokens", pa.int64()),
        pa.field("split", pa.string()),  # train | val, null unless ok
        pa.field("shard", pa.string()),  # filled when the subset is published
    ]
)

# One row per media reference of every parsed sample (a sample rejected at parse time has none).
MEDIA = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),  # position among the sample's media parts
        pa.field("ref", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # image | video
        pa.field("status", pa.string(), nullable=False),  # ok | rejected
        pa.field("reason", pa.string()),
        pa.field(
            "source", pa.string()
        ),  # where the reference resolved: media_root | subset | media | tar:<name>
        pa.field("sha256", pa.string()),  # of the upstream bytes
        pa.field("bytes", pa.int64()),  # upstream size
        pa.field("format", pa.string()),
        pa.field("width", pa.int32()),  # as displayed (EXIF orientation / rotation applied)
        pa.field("height", pa.int32()),
        pa.field("out_sha256", pa.string()),  # bytes written to shards (== sha256 when kept)
        pa.field("out_bytes", pa.int64()),
        pa.field("out_ext", pa.string()),
        pa.field("out_width", pa.int32()),
        pa.field("out_height", pa.int32()),
        pa.field("kept_original", pa.bool_()),
        pa.field("notes", pa.string()),
        pa.field("frames", pa.int32()),  # video: frames in the file
        pa.field("fps", pa.float64()),
        pa.field("sampled_frames", pa.int32()),  # video: frames the model's sampler takes
        pa.field("visual_tokens", pa.int64()),
    ]
)

SUBSETS = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("readme_sha256", pa.string()),
        pa.field("jsonl_sha256", pa.string()),
        pa.field("jsonl_bytes", pa.int64()),
        pa.field("license", pa.string()),
        pa.field("license_text", pa.string()),  # the README's own words when no SPDX id was recognised
        pa.field("media_tars", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("ok", pa.int64()),
        pa.field("rejected", pa.int64()),
        pa.field("dropped", pa.int64()),
        pa.field("text_tokens", pa.int64()),
        pa.field("visual_tokens", pa.int64()),
        pa.field("published", pa.bool_()),  # passed the gate and its Energon dataset was written
        pa.field("gate", pa.string()),  # passed | failed: <expectations> | skipped
        pa.field("revision", pa.string()),
        pa.field("run_id", pa.string()),
    ]
)

SHARDS = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("shard", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
    ]
)

TABLES: Final[dict[str, pa.Schema]] = {
    "samples": SAMPLES,
    "media": MEDIA,
    "subsets": SUBSETS,
    "shards": SHARDS,
}


def empty_row(schema: pa.Schema) -> dict[str, object]:
    """A row dict with every column of ``schema`` set to None (callers fill what they know)."""
    return {name: None for name in schema.names}
