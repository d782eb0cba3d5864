"""``vlmforge query`` reads the manifests and nothing else unless ``--allow-external-access`` is given: no
other file, no ``COPY ... TO``, no ``ATTACH``, no extension install or load, and SQL cannot lift the lock."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_in_process import Ran, vlmforge_in_process

from vlmforge.schemas.tables import SAMPLES, empty_row
from vlmforge.tasks.manifests import OutputLayout, write_part


def _sample(subset: str, line: int, **extra: object) -> dict[str, object]:
    row = {"subset": subset, "line": line, "status": "ok", "total_tokens": 3, "n_images": 1, "n_videos": 0}
    return empty_row(SAMPLES) | row | extra


@pytest.fixture
def out(tmp_path: Path) -> Path:
    layout = OutputLayout(str(tmp_path / "out"))
    write_part(layout, "samples", "a", 0, [_sample("a", 1), _sample("a", 2)])
    write_part(layout, "samples", "b", 0, [_sample("b", 1)])
    return tmp_path / "out"


def query(out: Path, sql: str, *flags: str) -> Ran:
    return vlmforge_in_process("query", str(out), sql, "--format", "csv", *flags)


def test_query_is_read_only_by_default(out: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("outside the manifests\n")
    written = tmp_path / "x.csv"
    part = next((out / "manifests/samples/subset=a").glob("part-*.parquet"))
    refused = {
        "read_text": f"SELECT * FROM read_text('{secret}')",
        "read_csv": f"SELECT * FROM read_csv('{secret}')",
        "COPY TO": f"COPY (SELECT 1 AS x) TO '{written}'",
        "COPY over a part": f"COPY (SELECT 1 AS x) TO '{part}' (FORMAT csv, USE_TMP_FILE false)",
        "ATTACH": f"ATTACH '{tmp_path / 'db.duckdb'}' AS other",
        "lift the lock": "SET enable_external_access = true",
        "LOAD": "LOAD httpfs",
        "INSTALL": "INSTALL httpfs",
        "glob": "SELECT * FROM glob('/etc/*')",
    }
    for what, sql in refused.items():
        r = query(out, sql)
        assert r.returncode != 0, f"{what} was allowed: {r.stdout[:500]}"
        assert "error:" in r.stderr and ("disabled" in r.stderr or "locked" in r.stderr), (what, r.stderr)
    assert not written.exists() and not (tmp_path / "db.duckdb").exists()
    before = part.read_bytes()
    r = query(out, "SELECT subset, count(*) AS n FROM samples GROUP BY ALL ORDER BY 1")
    assert r.returncode == 0 and r.stdout.splitlines() == ['"subset","n"', '"a",2', '"b",1'], r.stderr
    assert part.read_bytes() == before


def test_allow_external_access_lifts_it(out: Path, tmp_path: Path) -> None:
    secret = tmp_path / "outside.txt"
    secret.write_text("outside\n")
    r = query(out, f"SELECT content FROM read_text('{secret}')", "--allow-external-access")
    assert r.returncode == 0 and "outside" in r.stdout, r.stderr
    r = query(out, "SELECT count(*) AS n FROM samples", "--allow-external-access")
    assert r.returncode == 0 and r.stdout.splitlines()[1] == "3", r.stderr


def test_parts_of_different_ages_read_as_one_table(tmp_path: Path) -> None:
    """A part written before a column existed reads it as null (as ``union_by_name``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vlmforge.tasks.ops.query import run_query

    layout = OutputLayout(str(tmp_path))
    write_part(layout, "samples", "a", 0, [_sample("a", 1)])
    old = tmp_path / "manifests/samples/subset=b"
    old.mkdir(parents=True)
    pq.write_table(pa.table({"subset": ["b"], "line": [9]}), old / "part-00000.parquet")
    rows = run_query(str(tmp_path), "SELECT subset, line, total_tokens FROM samples ORDER BY 1").to_pylist()
    assert rows == [
        {"subset": "a", "line": 1, "total_tokens": 3},
        {"subset": "b", "line": 9, "total_tokens": None},
    ]
