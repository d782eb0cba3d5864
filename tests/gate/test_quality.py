"""Quality results per run: recording, drift baselines, Data Docs that open offline (headless Chromium when
present), the ``vlmforge quality OUT`` table, and a failing subset that keeps its previously published
shards while the others publish."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from vlmforge.flows.cli.quality import register
from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork, GateWork
from vlmforge.tasks.errors import OutputError
from vlmforge.tasks.gate.check import gate_subset
from vlmforge.tasks.gate.docs import build_data_docs
from vlmforge.tasks.gate.drift import last_published
from vlmforge.tasks.gate.gate_report import quality_markdown, quality_rows
from vlmforge.tasks.gate.params import load_overrides
from vlmforge.tasks.gate.results import GateResult, list_runs, load_run, record_gate, record_run
from vlmforge.tasks.manifests import OutputLayout

SAMPLE_RELEASE_OVERRIDES = Path(__file__).resolve().parents[2] / "expectations/sample-release-overrides.json"
RUN = "20260101T000000-aaaaaa"


def _build(release: Path, out: Path, subsets: tuple[str, ...] = ()) -> tuple[RunConfig, list[SubsetEntry]]:
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release
    from vlmforge.tasks.manifests import remove_parts_from

    cfg = RunConfig(release=str(release), out=str(out), batch_lines=4, max_reject_rate=0.01, subsets=subsets)
    entries = catalog_release(
        cfg.source.release, subsets=cfg.source.subsets, batch_lines=cfg.batches.batch_lines
    )
    layout = OutputLayout(cfg.out)
    for e in entries:
        remove_parts_from(layout, e.subset, len(e.batch_offsets) - 1)
        for i in range(len(e.batch_offsets) - 1):
            build_batch(e, i, BatchWork.of(cfg))
    return cfg, entries


@pytest.fixture(scope="module")
def gated(sample_release: Path, tmp_path_factory: pytest.TempPathFactory) -> OutputLayout:
    """The sample release gated with the default overrides (bad_rows fails) and its Data Docs built."""
    cfg, entries = _build(sample_release, tmp_path_factory.mktemp("quality") / "out")
    layout = OutputLayout(cfg.out)
    overrides = load_overrides()
    record_run(layout, RUN, subsets=[e.subset for e in entries], skip_gate=False, overrides=overrides)
    for e in entries:
        record_gate(layout, RUN, gate_subset(GateWork.of(cfg), e, run_id=RUN, overrides=overrides))
    build_data_docs(layout, RUN)
    return layout


def _result(subset: str, passed: bool, suite: str = "samples", stage: str = "gate") -> GateResult:
    return GateResult(
        subset=subset,
        passed=passed,
        failures=[] if passed else [f"{suite}: something is off: found 3 rows"],
        suites={suite: passed},
        stage=stage,
    )


def test_results_are_recorded_and_the_latest_run_is_read_back(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path / "out"))
    record_run(layout, "run-a", subsets=["x", "y"], skip_gate=False)
    record_gate(layout, "run-a", _result("x", True))
    record_gate(layout, "run-a", _result("y", True))
    record_gate(layout, "run-a", _result("y", False, "shards", stage="shards"))
    run_a = tmp_path / "out/quality/run-a"
    os.utime(run_a / "run.json", (1, 1))
    for p in run_a.iterdir():
        os.utime(p, (1_000, 1_000))
    record_gate(layout, "run-b", _result("x", False))
    assert list_runs(layout) == ["run-a", "run-b"]
    latest = load_run(layout)
    assert latest.run_id == "run-b" and latest.failed == ["x"]
    a = load_run(layout, "run-a")
    assert a.failed == ["y"]
    assert a.subsets["y"].suites == {"samples": True, "shards": False}
    assert a.subsets["y"].failures == ["shards: something is off: found 3 rows"]
    assert [r["result"] for r in quality_rows(a)] == ["passed", "failed"]
    with pytest.raises(OutputError, match="no quality results for run 'nope'"):
        load_run(layout, "nope")


def test_skip_gate_is_recorded_with_the_run(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path / "out"))
    record_run(layout, "r", subsets=["x", "y"], skip_gate=True)
    run = load_run(layout)
    assert run.skip_gate and run.failed == []
    assert [r["result"] for r in quality_rows(run)] == ["skipped (--skip-gate)"] * 2
    assert "**The gate was skipped (--skip-gate).**" in quality_markdown(run)


def test_no_results_is_a_readable_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="has no quality results"):
        load_run(OutputLayout(str(tmp_path / "empty")))


def _run_json(out: Path, run_id: str, subsets: dict[str, tuple[bool, dict[str, int]]], mtime: float) -> None:
    path = out / "runs" / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "run_id": run_id,
        "subsets": [{"subset": s, "published": pub, "stats": stats} for s, (pub, stats) in subsets.items()],
    }
    path.write_text(json.dumps({"config": {}, "summary": summary}))
    os.utime(path, (mtime, mtime))


def test_last_published_is_the_latest_run_that_published_the_subset(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stats = {"lines": 100, "ok": 90, "rejected": 10, "dropped": 0, "text_tokens": 1000, "visual_tokens": 500}
    _run_json(out, "r1", {"a": (True, stats), "b": (False, stats)}, 1_000)
    _run_json(out, "r2", {"a": (False, stats | {"lines": 5})}, 2_000)
    _run_json(out, "r3", {"a": (True, stats | {"lines": 200})}, 3_000)
    (out / "runs/r4.json").write_text("{not json")
    layout = OutputLayout(str(out))
    base = last_published(layout, "a")
    assert base is not None and (base.run_id, base.rows, base.token_sum, base.rejected) == (
        "r3",
        200,
        1500,
        10,
    )
    assert base.reject_rate == 0.05
    older = last_published(layout, "a", exclude_run="r3")
    assert older is not None and older.run_id == "r1"
    assert last_published(layout, "b") is None
    assert last_published(layout, "zzz") is None
    assert last_published(OutputLayout(str(tmp_path / "none")), "a") is None


def test_data_docs_hold_every_validation_and_open_offline(gated: OutputLayout) -> None:
    docs = Path(gated.quality) / RUN / "docs"
    index = (docs / "index.html").read_text()
    assert (
        "Quality gate of run" in index
        and "3 of 4 checked subsets passed; held back: <b>bad_rows</b>" in index
    )
    assert "samples: reject rate at most 1.00%: found 75.0% of rows rejected" in index
    links = re.findall(r'href="([^"]+)"', index)
    assert len([h for h in links if h.startswith("validations/")]) == 4 * 3  # 4 subsets x 3 suites
    for href in links:
        assert (docs / href).is_file(), href
    assert (docs / "gx-index.html").is_file()
    for page in docs.rglob("*.html"):
        text = page.read_text()
        if page.name != "index.html":
            assert 'rel="stylesheet" href="http' not in text and '<script src="http' not in text, page
            assert "vlmforge-offline.css" in text
    page = next(docs.glob("validations/samples/*/*/bad_rows.html")).read_text()
    assert "Failed" in page and "share" in page and "bad_rows (samples profile)" in page
    index_json = json.loads((Path(gated.quality) / "index.json").read_text())
    assert index_json["runs"][-1]["run_id"] == RUN and index_json["runs"][-1]["failed"] == ["bad_rows"]


def test_the_pages_share_one_copy_of_their_assets(gated: OutputLayout) -> None:
    """The stylesheet and images live once per output folder (``quality/_assets/<digest>/``), referred to
    relatively from every page; a rebuild writes the same bytes to the same folder, not a copy per run."""
    quality = Path(gated.quality)
    docs = quality / RUN / "docs"
    assert not (docs / "static").exists()
    assert sum(f.stat().st_size for f in docs.rglob("*") if f.is_file()) < 1_000_000  # was ~4.5 MB
    folders = list((quality / "_assets").iterdir())
    assert len(folders) == 1
    before = {f.relative_to(quality): f.read_bytes() for f in folders[0].rglob("*") if f.is_file()}
    assert {p.name for p in before} >= {"vlmforge-offline.css", "logo-long.png", "favicon.ico"}
    for page in docs.rglob("*.html"):
        for ref in re.findall(r'(?:href|src)="([^"#]*_assets/[^"]+)"', page.read_text()):
            assert (page.parent / ref).resolve().is_file(), (page, ref)
            assert (page.parent / ref).resolve().is_relative_to(folders[0]), (page, ref)
    build_data_docs(gated, RUN)
    assert list((quality / "_assets").iterdir()) == folders
    assert list_runs(gated) == [RUN]  # the shared folder is no run
    after = {f.relative_to(quality): f.read_bytes() for f in folders[0].rglob("*") if f.is_file()}
    assert after == before


def test_the_markdown_summary_links_the_docs_and_names_the_failures(gated: OutputLayout) -> None:
    docs = build_data_docs(gated, RUN)  # rebuilding a run's docs replaces them
    md = quality_markdown(load_run(gated, RUN), docs)
    assert f"Data Docs: [{docs.index}]({docs.url})" in md and docs.url.startswith("file://")
    assert "| bad_rows | failed | FAILED | ok | ok | - | samples: reject rate at most 1.00%" in md
    assert len(json.loads((Path(gated.quality) / "index.json").read_text())["runs"]) == 1


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Everything but file:// is unreachable: no name resolves, and any proxy request goes to a closed port.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
def test_data_docs_render_in_a_headless_browser(gated: OutputLayout, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    docs = Path(gated.quality) / RUN / "docs"
    dom = subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, "--dump-dom", (docs / "index.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "bad_rows" in dom and "failed" in dom and "reject rate at most 1.00%" in dom
    page = next(docs.glob("validations/samples/*/*/bad_rows.html"))
    shot = tmp_path / "validation.png"
    subprocess.run(
        [CHROMIUM, *CHROMIUM_FLAGS, "--window-size=1280,1600", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keeps `quality` a named sub-command, as in the real CLI
        pass

    return app


def test_the_quality_command_prints_the_last_results(gated: OutputLayout) -> None:
    result = CliRunner().invoke(_cli(), ["quality", gated.out], env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    assert f"quality gate of run {RUN}" in result.output
    row = next(line for line in result.output.splitlines() if "bad_rows" in line)
    assert "failed" in row and "FAILED" in row and "samples: reject rate at most 1.00%" in row
    assert "photo_vqa" in result.output and "Data Docs:" in result.output
    as_json = CliRunner().invoke(_cli(), ["quality", gated.out, "--format", "json"], env={"COLUMNS": "220"})
    data: dict[str, Any] = json.loads(as_json.output)
    assert data["run_id"] == RUN and data["failed"] == ["bad_rows"]
    assert data["subsets"][0]["failures"][0].startswith("samples: reject rate at most 1.00%")


def test_the_quality_command_says_when_there_is_nothing_to_show(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["quality", str(tmp_path)])
    assert isinstance(result.exception, OutputError) and "has no quality results" in str(result.exception)


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
def test_a_silent_upstream_change_holds_the_subset_back_and_keeps_its_published_shards(
    sample_release: Path, tmp_path: Path
) -> None:
    """Run 1 publishes two subsets; upstream then drops lines from one of them; run 2's gate fails that
    subset on drift, so its published dataset stays byte for byte, while the other republishes."""
    from vlmforge.tasks.publish.publish import publish_subset

    release = tmp_path / "release"
    shutil.copytree(sample_release, release)
    subsets = ("multi_image", "photo_vqa")

    def run(run_id: str) -> dict[str, GateResult]:
        """The flow's decisions, without Prefect: gate every subset, publish the ones that pass."""
        from vlmforge.tasks.ops.query import run_query

        cfg, entries = _build(release, tmp_path / "out", subsets)
        layout = OutputLayout(cfg.out)
        overrides = load_overrides(SAMPLE_RELEASE_OVERRIDES)
        record_run(layout, run_id, subsets=subsets, skip_gate=False, overrides=overrides)
        results = {}
        for e in entries:
            results[e.subset] = gate = gate_subset(GateWork.of(cfg), e, run_id=run_id, overrides=overrides)
            record_gate(layout, run_id, gate)
            if gate.passed:
                publish_subset(layout, e.subset, shard_max_bytes=10**9, shard_max_samples=4)
        counts = run_query(
            cfg.out,
            "SELECT subset, count(*) AS lines, count(*) FILTER (status = 'rejected') AS rejected, "
            "CAST(sum(text_tokens) FILTER (status = 'ok') AS BIGINT) AS text_tokens, "
            "CAST(sum(visual_tokens) FILTER (status = 'ok') AS BIGINT) AS visual_tokens "
            "FROM samples GROUP BY ALL",
        ).to_pylist()
        recorded = {}
        for c in counts:
            name = c.pop("subset")
            recorded[name] = (results[name].passed, c)
        # what the flow records in OUT/runs/<run>.json
        _run_json(tmp_path / "out", run_id, recorded, {"r1": 1_000, "r2": 2_000}[run_id])
        return results

    first = run("r1")
    assert all(r.passed for r in first.values())
    energon = tmp_path / "out" / "energon"
    before = {s: _tree(energon / s) for s in subsets}

    inode = (energon / "multi_image").stat().st_ino

    jsonl = release / "photo_vqa" / "photo_vqa.jsonl"
    lines = jsonl.read_text().splitlines(keepends=True)
    jsonl.write_text("".join(lines[:7]))  # 10 -> 7 lines, nothing else says so

    second = run("r2")
    assert second["multi_image"].passed, second["multi_image"].failures
    held = second["photo_vqa"]
    assert not held.passed and held.suites == {"samples": True, "media": True, "drift": False}
    assert held.failures[0] == "drift: rows moved -30.0% since published run r1 (10 -> 7); limit +/-5.0%"
    assert _tree(energon / "photo_vqa") == before["photo_vqa"]  # the previous version stays
    assert (energon / "multi_image").stat().st_ino != inode  # republished (swapped in anew)
    regenerated = (".nv-meta/index.uuid", ".nv-meta/index.sqlite")  # energon writes these anew each time
    same = {k: v for k, v in _tree(energon / "multi_image").items() if k not in regenerated}
    assert same == {k: v for k, v in before["multi_image"].items() if k not in regenerated}  # same bytes

    docs = build_data_docs(OutputLayout(str(tmp_path / "out")), "r2")
    report = Path(docs.index).read_text()
    assert "held back: <b>photo_vqa</b>" in report and "rows moved -30.0%" in report
