"""``--limit N`` (a trial run, issue 43 item 10): the first N rows of each subset go through every stage and
are published, the rest are counted as ``beyond_limit`` (rows = ok + rejected + dropped + beyond_limit) and
the subset is said to be partial; a later run without the limit completes it (the trial's dataset is not
taken as current) and publishes what a whole run publishes. Local executor, the session's Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import run_flow, tree_hashes

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.publish import read_manifest

pytestmark = pytest.mark.slow
SUBSETS = ("photo_vqa", "multi_image")


def _subsets_rows(out: Path) -> dict[str, tuple[int, ...]]:
    rows = duckdb.sql(
        f"SELECT subset, rows, ok + rejected + dropped, beyond_limit, published::INT "
        f"FROM read_parquet('{out}/manifests/subsets/*/*.parquet', hive_partitioning=true)"
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def test_a_trial_run_takes_the_first_rows_and_a_whole_run_completes_it(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = RunConfig(release=str(sample_release), out=str(out), subsets=SUBSETS)
    trial = run_flow(cfg.replace(limit=3))
    assert trial.failed == [], trial
    for s in trial.subsets:
        assert s.stats.lines == 3 and s.published and "partial: --limit 3" in s.gate, s
    assert {s.subset: s.beyond_limit for s in trial.subsets} == {"photo_vqa": 7, "multi_image": 2}
    assert _subsets_rows(out) == {"photo_vqa": (10, 3, 7, 1), "multi_image": (5, 3, 2, 1)}
    lines = duckdb.sql(
        f"SELECT DISTINCT line FROM read_parquet('{out}/manifests/samples/*/*.parquet') ORDER BY 1"
    ).fetchall()
    assert [r[0] for r in lines] == [1, 2, 3]  # the first rows of the JSONL, deterministically
    published = sum(e["samples"] for e in read_manifest(out / "energon" / "photo_vqa"))
    assert published == trial.subsets[0].stats.ok <= 3

    whole = run_flow(cfg)
    assert whole.failed == [] and not any(s.unchanged or s.beyond_limit for s in whole.subsets), whole
    assert {s.subset: s.stats.lines for s in whole.subsets} == {"photo_vqa": 10, "multi_image": 5}
    assert all("partial" not in s.gate for s in whole.subsets)
    assert _subsets_rows(out) == {"photo_vqa": (10, 10, 0, 1), "multi_image": (5, 5, 0, 1)}
    fresh = tmp_path / "fresh"
    run_flow(cfg.model_copy(update={"out": str(fresh)}))
    assert tree_hashes(out / "energon") == tree_hashes(fresh / "energon")


def test_limit_is_an_option_of_run_checked_before_start_up(sample_release: Path, tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "vlmforge.flows.cli"]
    done = subprocess.run(
        [*cli, "run", str(sample_release), "--out", str(tmp_path / "o"), "--limit", "0"],
        capture_output=True,
        text=True,
        env=os.environ | {"PREFECT_API_URL": "http://127.0.0.1:9/api"},
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--limit" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
