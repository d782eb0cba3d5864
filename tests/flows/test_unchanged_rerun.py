"""A rerun with nothing changed (issue 43, item 3): a subset whose every batch is current and whose inputs,
options and code are those of its last publish is reported ``unchanged`` and is not gated, published or
read back again (its earlier verdict and dataset stand); a run stopped after a publish leaves the next one
only the read-back of that subset. Runs on the local executor, reporting to the session's Prefect server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from conftest import run_flow, tree_hashes

from vlmforge.flows.runtime.embedded import configured_api_url
from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.catalog import unpublish_subset
from vlmforge.tasks.gate import load_run
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.validate import validate_subset

pytestmark = pytest.mark.slow
SUBSETS = ("photo_vqa", "video_qa")
STAGES = ("gate started", "publish started", "validate started")


def _stages(events: list[str], subset: str) -> list[str]:
    return [e.rsplit(" ", 1)[0] for e in events if e.endswith(f" {subset}") and e.startswith(STAGES)]


def test_a_rerun_with_nothing_changed_leaves_every_subset_as_it_is(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = RunConfig(release=str(sample_release), out=str(out), subsets=SUBSETS)
    first = run_flow(cfg)
    assert first.failed == [] and not any(s.unchanged for s in first.subsets), first
    published = tree_hashes(out / "energon")
    # read-backs in threads of one process (the local executor's) each read their own dataset: energon's
    # process-wide worker config is taken by one at a time (it raised a bare AssertionError)
    start = threading.Barrier(len(SUBSETS))

    def read_back(subset: str) -> list[str]:
        start.wait()
        return validate_subset(str(out), subset, sample_limit=64).problems

    with ThreadPoolExecutor(len(SUBSETS)) as pool:
        assert list(pool.map(read_back, SUBSETS)) == [[]] * len(SUBSETS)

    again = run_flow(cfg)
    for s in again.subsets:
        assert s.unchanged and s.published and s.stats.skipped_batches == s.stats.batches > 0, s
        assert (s.gate, s.validation) == ("unchanged: passed", "unchanged"), s
        assert _stages(again.events, s.subset) == [], again.events
    assert sorted(e for e in again.events if e.startswith("unchanged")) == [f"unchanged {s}" for s in SUBSETS]
    assert again.failed == [] and again.unreadable == []
    assert tree_hashes(out / "energon") == published
    # the earlier verdicts stand for this run too: `vlmforge quality OUT` shows them, from the first run
    quality = load_run(OutputLayout(str(out)), again.run_id)
    assert {name: q.passed for name, q in quality.subsets.items()} == dict.fromkeys(SUBSETS, True)
    carried = json.loads((out / "quality" / again.run_id / "photo_vqa.json").read_text())
    assert carried["carried_from"] == first.run_id

    # an option of publish only: every subset gated and published again, nothing unchanged
    smaller = cfg.replace(shard_max_samples=2)
    third = run_flow(smaller)
    assert not any(s.unchanged for s in third.subsets) and third.failed == []
    for name in SUBSETS:
        assert _stages(third.events, name) == list(STAGES), third.events

    # a dataset taken away since (refresh unpublished it, a person deleted it) is published again
    assert unpublish_subset(OutputLayout(str(out)), "photo_vqa")
    fourth = run_flow(smaller)
    outcome = {s.subset: s for s in fourth.subsets}
    assert not outcome["photo_vqa"].unchanged and outcome["photo_vqa"].published
    assert _stages(fourth.events, "photo_vqa") == list(STAGES)
    assert outcome["video_qa"].unchanged and _stages(fourth.events, "video_qa") == []
    assert (out / "energon" / "photo_vqa" / "vlmforge-shards.json").is_file()


def _cli(out: Path, release: Path, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release), "--out", str(out)]
    cmd += [a for s in SUBSETS for a in ("--subset", s)] + ["--executor", "local"]
    environ = os.environ.copy() | {"PREFECT_API_URL": str(configured_api_url()), "COLUMNS": "80"} | env
    return subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=900)


def _record(out: Path) -> dict[str, Any]:
    newest = sorted((out / "runs").glob("*.json"))[-1]
    summary: dict[str, Any] = json.loads(newest.read_text())["summary"]
    return summary


def test_a_resume_after_a_stop_does_not_gate_or_publish_what_was_published(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # stopped as the first read-back is submitted: some subset is published, none read back
    killed = _cli(out, sample_release, VLMFORGE_TEST_KILL_AT="validate:0")
    assert "vlmforge-test-kill validate:0" in killed.stderr, killed.stderr[-3000:]
    published_before = {p.stem for p in (out / "runs" / "current").glob("*.json")}
    assert published_before, "the stopped run recorded no publish"

    resumed = _cli(out, sample_release)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    summary = _record(out)
    outcome = {s["subset"]: s for s in summary["subsets"]}
    for name in SUBSETS:
        assert outcome[name]["published"] and outcome[name]["validation"] == "ok", outcome[name]
        if name in published_before:  # only read back: its gate verdict and dataset stand
            assert outcome[name]["unchanged"], outcome[name]
            assert _stages(summary["events"], name) == ["validate started"], summary["events"]
        else:
            assert _stages(summary["events"], name) == list(STAGES), summary["events"]
    assert "read back now (a stopped run had not): " in resumed.stdout, resumed.stdout

    # then nothing changed: no stage at all, said once, and the skipped batches are not "0.0 rows/s"
    rerun = _cli(out, sample_release)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    summary = _record(out)
    assert all(_stages(summary["events"], name) == [] for name in SUBSETS), summary["events"]
    assert "unchanged since the last publish (same inputs, options and code): every subset;" in rerun.stdout
    err = rerun.stderr.splitlines()
    assert not any(line.endswith(": started") for line in err), err  # no "gate: started", ...
    said = sorted(line for line in err if line.endswith(": unchanged"))
    assert said == [f"{s}: unchanged" for s in SUBSETS], err
    progress = [line for line in err if " · batches " in line]
    assert progress and all("rows current, skipped (not redone)" in line for line in progress), progress
    assert not any("0.0 rows/s" in line for line in err), err
