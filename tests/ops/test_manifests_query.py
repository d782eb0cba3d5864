"""Manifest parts (atomic, fingerprinted) and the DuckDB views over them."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlmforge.schemas.tables import MEDIA, SAMPLES, empty_row
from vlmforge.tasks.errors import ConfigError, OutputError
from vlmforge.tasks.manifests import (
    FINGERPRINT_KEY,
    OutputLayout,
    part_metadata,
    read_table,
    remove_parts_from,
    write_part,
)
from vlmforge.tasks.ops.query import render, run_query, text_rows


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


def _media(subset: str, line: int, frames: list[int] | None) -> dict[str, object]:
    return empty_row(MEDIA) | {
        "subset": subset,
        "line": line,
        "sample_id": f"s{line}",
        "index": 0,
        "kind": "video" if frames else "image",
        "ref": f"v{line}.mp4, with a comma",
        "status": "ok",
        "frame_indices": frames,
        "frame_sha256": ["a" * 64] * len(frames) if frames else None,
    }


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``vlmforge`` command, as a user runs it."""
    exe = Path(sys.executable).with_name("vlmforge")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def media_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("query")
    layout = OutputLayout(str(out))
    write_part(layout, "samples", "a", 0, [_sample("a", 1), _sample("a", 2)])
    write_part(layout, "media", "a", 0, [_media("a", 1, [0, 5, 9]), _media("a", 2, None)])
    return out


def test_every_format_writes_list_columns(media_out: Path) -> None:
    table = run_query(
        str(media_out), "SELECT line, ref, frame_indices, frame_sha256 FROM media ORDER BY line"
    )
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert [json.loads(r["frame_indices"]) if r["frame_indices"] else None for r in rows] == [[0, 5, 9], None]
    assert json.loads(rows[0]["frame_sha256"]) == ["a" * 64] * 3 and rows[0]["ref"] == "v1.mp4, with a comma"
    assert json.loads(render(table, "json"))[0]["frame_indices"] == [0, 5, 9]
    assert text_rows(table)[0][2] == "[0, 5, 9]" and text_rows(table)[1][2] == ""
    structs = run_query(
        str(media_out), "SELECT {'a': 1, 'b': [line]} AS s, 'x'::BLOB AS b FROM media LIMIT 1"
    )
    assert render(structs, "csv").splitlines()[1] == '"{""a"": 1, ""b"": [1]}","78"'
    with pytest.raises(ConfigError, match="--format 'xml': expected one of table, csv, json"):
        render(table, "xml")


@pytest.mark.slow  # the installed command as its own process (7 s)
def test_the_cli_writes_csv_of_every_media_column_and_says_a_bad_query_in_one_line(media_out: Path) -> None:
    done = _cli("query", str(media_out), "SELECT * FROM media", "--format", "csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert len(rows) == 2 and json.loads(rows[0]["frame_indices"]) == [0, 5, 9]
    bad = _cli("query", str(media_out), "SELECT no_such_column FROM media", "--format", "csv")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    first, *rest = bad.stderr.strip().splitlines()
    assert first.startswith("error: query failed: Binder Error:") and "no_such_column" in first
    assert rest == ["(set VLMFORGE_DEBUG=1 for the traceback)"]
