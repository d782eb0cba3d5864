"""Typed manifest rows: the Parquet schemas derive from them, keep their columns, and refuse unknown keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.schemas.rows import MediaRow, SampleRow
from vlmforge.schemas.tables import MEDIA, SAMPLES
from vlmforge.tasks.manifests import OutputLayout, read_table, write_part

# The columns as released (MANIFEST BREAKING CHANGE rule): later columns may be added, never these changed.
SAMPLES_COLUMNS = [
    "subset: string not null", "sample_id: string", "line: int64 not null", "key: string",
    "status: string not null", "reason: string", "n_images: int32 not null", "n_videos: int32 not null",
    "text_tokens: int64", "visual_tokens: int64", "total_tokens: int64", "split: string", "shard: string",
    "id_conflict_of: int64", "truncated_tokens: int64",
]  # fmt: skip
MEDIA_COLUMNS = [
    "subset: string not null", "sample_id: string not null", "line: int64 not null", "index: int32 not null",
    "ref: string not null", "kind: string not null", "status: string not null", "reason: string",
    "source: string", "sha256: string", "bytes: int64", "format: string", "width: int32", "height: int32",
    "out_sha256: string", "out_bytes: int64", "out_ext: string", "out_width: int32", "out_height: int32",
    "kept_original: bool", "notes: string", "frames: int32", "fps: double", "sampled_frames: int32",
    "visual_tokens: int64", "upstream: string", "fetch_status: string", "fetch_detail: string",
    "frame_indices: list<item: int32>", "frame_sha256: list<item: string>", "frame_bytes: list<item: int64>",
]  # fmt: skip


def _columns(schema: object) -> list[str]:
    return [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("schema", "released"), [(SAMPLES, SAMPLES_COLUMNS), (MEDIA, MEDIA_COLUMNS)])
def test_released_columns_keep_their_order_names_types_and_nullability(
    schema: object, released: list[str]
) -> None:
    assert _columns(schema)[: len(released)] == released


def test_a_row_refuses_an_unknown_column() -> None:
    with pytest.raises(TypeError):
        SampleRow(subset="s", line=1, n_image=2)  # type: ignore[call-arg]
    row = MediaRow(subset="s", sample_id="a", line=1, index=0, ref="x.png", kind="image")
    with pytest.raises(AttributeError):
        row.visual_token = 3  # type: ignore[attr-defined]


def test_write_part_refuses_a_misspelt_key_and_writes_typed_rows(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path / "out"))
    with pytest.raises(ValueError, match="visual_token"):
        write_part(layout, "samples", "s", 0, [{"subset": "s", "line": 1, "status": "ok", "visual_token": 3,
                                                "n_images": 0, "n_videos": 0}])  # fmt: skip
    rows = [SampleRow(subset="s", line=1, n_images=1, text_tokens=5), SampleRow(subset="s", line=2)]
    rows[1].status, rows[1].reason = "rejected", "empty_line"
    write_part(layout, "samples", "s", 0, rows)
    back = read_table(layout, "samples", "s").to_pylist()
    assert [(r["line"], r["status"], r["text_tokens"], r["reason"]) for r in back] == [
        (1, "ok", 5, None),
        (2, "rejected", None, "empty_line"),
    ]
