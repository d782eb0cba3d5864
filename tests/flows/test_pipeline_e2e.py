"""End to end over the sample release: real local Ray, Prefect's test harness, real Great Expectations,
shards loaded back through megatron-energon with the project's cooker."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import load_energon_samples, run_flow, tree_hashes
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.ops.query import run_query
from vlmforge.tasks.sample_release.expected import EXPECTED, EXPECTED_MEDIA_ERRORS
from vlmforge.tasks.validate import validate_energon_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def first_run(prefect_harness: None, sample_release: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    out = tmp_path_factory.mktemp("out") / "run"
    cfg = RunConfig(release=str(sample_release), out=str(out), max_reject_rate=0.9, batch_lines=4)
    return cfg, run_flow(cfg)


def test_every_line_is_accounted_for_with_the_expected_status(first_run: Any) -> None:
    cfg, summary = first_run
    layout = OutputLayout(cfg.out)
    assert sorted(s.subset for s in summary.subsets) == sorted(EXPECTED)
    for subset, lines in EXPECTED.items():
        rows = read_table(layout, "samples", subset).to_pylist()
        assert [r["line"] for r in rows] == [e["line"] for e in lines], subset  # each line exactly once
        for row, exp in zip(rows, lines, strict=True):
            assert row["status"] == exp["status"], (subset, row)
            if exp["reason_prefix"]:
                assert row["reason"].startswith(exp["reason_prefix"]), (subset, row["reason"])
            detail = EXPECTED_MEDIA_ERRORS.get((subset, row["line"]))
            if detail:
                assert row["reason"].endswith(detail), row["reason"]
            if exp["status"] == "ok":
                assert row["n_images"] == exp["n_images"] and row["n_videos"] == exp["n_videos"]
                assert row["total_tokens"] == row["text_tokens"] + row["visual_tokens"] > 0
                assert row["shard"] and row["key"] and "." not in row["key"]


def test_energon_loads_every_ok_sample_and_nothing_else(first_run: Any) -> None:
    cfg, summary = first_run
    layout = OutputLayout(cfg.out)
    assert summary.failed == []
    for subset in EXPECTED:
        samples = read_table(layout, "samples", subset).to_pylist()
        ok = [r for r in samples if r["status"] == "ok"]
        expected = {"train": [r["key"] for r in ok]}
        report = validate_energon_dataset(Path(cfg.out) / "energon" / subset, expected)
        assert report.ok, report.problems
        assert report.counts == {"train": len(ok)}
        for r in ok:  # one media part per image/video, in order of appearance
            parts = report.media_parts[r["key"]]
            assert len(parts) == r["n_images"] + r["n_videos"]
            assert [int(p.split(".")[0]) for p in parts] == list(range(len(parts)))


def test_published_subsets_pass_the_gate_shards_suite_and_read_back(first_run: Any) -> None:
    cfg, summary = first_run
    quality = Path(cfg.out) / "quality" / summary.run_id
    for s in summary.subsets:
        assert s.published and s.validation == "ok", (s.subset, s.validation)
        assert json.loads((quality / f"{s.subset}.json").read_text())["passed"] is True
        assert json.loads((quality / f"{s.subset}.shards.json").read_text())["passed"] is True
    report = (quality / "docs" / "index.html").read_text()
    assert all(s.subset in report for s in summary.subsets)  # Data Docs: one row per subset
    row = run_query(cfg.out, "SELECT release, skip_gate, published FROM subsets LIMIT 1").to_pylist()[0]
    assert row == {"release": cfg.source.release, "skip_gate": False, "published": True}


def test_large_image_is_resized_to_the_models_grid_and_small_ones_keep_their_bytes(first_run: Any) -> None:
    cfg, _ = first_run
    media = run_query(cfg.out, "SELECT * FROM media WHERE status = 'ok'").to_pylist()
    images = [m for m in media if m["kind"] == "image"]
    big = [m for m in images if m["width"] * m["height"] > 12_845_056]
    assert big, "the sample release has a large image"
    for m in big:
        assert not m["kept_original"]
        assert m["out_width"] % 28 == 0 and m["out_height"] % 28 == 0
        assert m["out_width"] * m["out_height"] <= 12_845_056
    kept = [m for m in images if m["kept_original"]]
    assert kept and all(m["out_sha256"] == m["sha256"] for m in kept)
    videos = [m for m in media if m["kind"] == "video"]
    assert videos and all(m["frames"] > 8 and m["sampled_frames"] >= 2 for m in videos)


def test_query_answers_sql_over_the_manifests(first_run: Any) -> None:
    cfg, summary = first_run
    rows = run_query(
        cfg.out,
        "SELECT subset, count(*) AS n, sum(total_tokens) AS t FROM samples GROUP BY ALL ORDER BY subset",
    ).to_pylist()
    assert {r["subset"]: r["n"] for r in rows} == {s: len(v) for s, v in EXPECTED.items()}
    subsets = {r["subset"]: r for r in run_query(cfg.out, "SELECT * FROM subsets").to_pylist()}
    for name, r in subsets.items():
        assert r["rows"] == r["ok"] + r["rejected"] + r["dropped"] == len(EXPECTED[name])
        assert r["published"]
    assert subsets["photo_vqa"]["license"] == "CC-BY-4.0"
    assert subsets["bad_rows"]["license"] == "unknown"
    shards = run_query(cfg.out, "SELECT sum(samples) AS n FROM shards").to_pylist()[0]["n"]
    assert shards == sum(s.stats.ok for s in summary.subsets)


def test_every_published_dataset_reads_back_with_its_format_reader(first_run: Any) -> None:
    cfg, _ = first_run
    samples, ok = load_energon_samples(cfg.out, 60)
    sizes: dict[str, list[tuple[int, int]]] = {}
    for r in run_query(
        cfg.out,
        "SELECT s.key, m.out_width, m.out_height FROM media m JOIN samples s USING (subset, line) "
        "WHERE s.status = 'ok' AND m.kind = 'image' ORDER BY s.key, m.index",
    ).to_pylist():
        sizes.setdefault(r["key"], []).append((r["out_width"], r["out_height"]))
    for sample in samples:
        assert sample.record["vlmforge"]["total_tokens"] == ok[sample.__key__]["total_tokens"]
        decoded = []
        for img in sample.images:  # the bridge format carries the stored image bytes, in placeholder order
            with Image.open(io.BytesIO(img)) as im:
                im.load()  # decodes as the trainer will
                decoded.append(im.size)
        assert decoded == sizes.get(sample.__key__, [])  # at the stored (factor-aligned) size
    seen = {sample.__key__ for sample in samples}
    assert {k.split("__")[0] for k in seen} == set(EXPECTED)  # the blend draws from every subset


def test_rerun_skips_every_batch_and_yields_the_same_bytes(first_run: Any) -> None:
    cfg, first = first_run
    before = tree_hashes(Path(cfg.out) / "energon")
    manifests_before = tree_hashes(Path(cfg.out) / "manifests" / "samples")
    again = run_flow(cfg)
    assert all(s.stats.skipped_batches == s.stats.batches > 0 for s in again.subsets)
    assert tree_hashes(Path(cfg.out) / "energon") == before
    assert tree_hashes(Path(cfg.out) / "manifests" / "samples") == manifests_before
    assert [s.stats.ok for s in again.subsets] == [s.stats.ok for s in first.subsets]


def test_a_subset_that_fails_its_gate_is_held_back_and_named(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    cfg = RunConfig(release=str(sample_release), out=str(tmp_path / "out"), subsets=("bad_rows", "photo_vqa"))
    summary = run_flow(cfg)  # default max_reject_rate 0.5: bad_rows rejects 12 of 15 lines
    assert summary.failed == ["bad_rows"]
    outcome = next(s for s in summary.subsets if s.subset == "bad_rows")
    assert "reject rate" in outcome.gate
    assert not (tmp_path / "out" / "energon" / "bad_rows").exists()
    assert (tmp_path / "out" / "energon" / "photo_vqa" / ".nv-meta" / "split.yaml").exists()
    results = json.loads(next((tmp_path / "out" / "quality").glob("*/bad_rows.json")).read_text())
    assert results["passed"] is False and results["failures"]
