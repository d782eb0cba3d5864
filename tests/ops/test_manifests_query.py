"""Manifest parts (atomic, fingerprinted) and the DuckDB views over them."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.schemas.manifests import SAMPLES, empty_row
from vlmforge.tasks.errors import OutputError
from vlmforge.tasks.manifests import (
    FINGERPRINT_KEY,
    OutputLayout,
    part_metadata,
    read_table,
    remove_parts_from,
    write_part,
)
from vlmforge.tasks.ops.query import run_query


def _sample(subset: str, line: int, status: str = "ok", tokens: int = 10) -> dict[str, object]:
    return empty_row(SAMPLES) | {
        "subset": subset,
        "line": line,
        "status": status,
        "n_images": 1,
        "n_videos": 0,
        "total_tokens": tokens if status == "ok" else None,
        "reason": None if status == "ok" else "invalid_json: x",
    }


def test_parts_roundtrip_with_fingerprint_and_leave_no_temp_files(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path))
    write_part(layout, "samples", "a", 0, [_sample("a", 1), _sample("a", 2, "rejected")], fingerprint="fp0")
    write_part(layout, "samples", "a", 1, [_sample("a", 3)], fingerprint="fp1")
    table = read_table(layout, "samples", "a")
    assert table.column("line").to_pylist() == [1, 2, 3]
    assert table.schema.equals(SAMPLES)
    meta = part_metadata(layout, layout.part("samples", "a", 1))
    assert meta is not None and meta[FINGERPRINT_KEY] == b"fp1"
    assert part_metadata(layout, layout.part("samples", "a", 7)) is None
    files = sorted(p.name for p in (tmp_path / "manifests/samples/subset=a").iterdir())
    assert files == ["part-00000.parquet", "part-00001.parquet"]


def test_stale_parts_beyond_the_new_batch_count_are_removed(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path))
    for i in range(3):
        write_part(layout, "samples", "a", i, [_sample("a", i + 1)])
    remove_parts_from(layout, "a", 1)
    assert read_table(layout, "samples", "a").column("line").to_pylist() == [1]


def test_query_sees_every_subset_and_empty_tables_still_bind(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path))
    write_part(layout, "samples", "a", 0, [_sample("a", 1, tokens=5), _sample("a", 2, tokens=7)])
    write_part(layout, "samples", "b", 0, [_sample("b", 1, "rejected")])
    # A temporary file of an interrupted write is never read.
    (tmp_path / "manifests/samples/subset=a/.tmp-0123-part-00009.parquet").write_bytes(b"partial")
    sql = "SELECT subset, count(*) AS n, sum(total_tokens) AS t FROM samples GROUP BY ALL ORDER BY 1"
    rows = run_query(str(tmp_path), sql).to_pylist()
    assert rows == [{"subset": "a", "n": 2, "t": 12}, {"subset": "b", "n": 1, "t": None}]
    assert run_query(str(tmp_path), "SELECT count(*) AS n FROM shards").to_pylist() == [{"n": 0}]


def test_query_errors_are_readable(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="has no manifests"):
        run_query(str(tmp_path / "nope"), "SELECT 1")
    layout = OutputLayout(str(tmp_path))
    write_part(layout, "samples", "a", 0, [_sample("a", 1)])
    with pytest.raises(OutputError, match="no_such_column"):
        run_query(str(tmp_path), "SELECT no_such_column FROM samples")
