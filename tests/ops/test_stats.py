"""Per-subset statistics and the self-contained HTML report, on the sample release."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.errors import ConfigError, OutputError
from vlmforge.tasks.ops.stats.compute import compute_stats
from vlmforge.tasks.ops.stats.page import render_html, write_stats_report
from vlmforge.tasks.ops.stats.svg import svg_histogram


@pytest.fixture(scope="module")
def out(sample_release: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release

    cfg = RunConfig(release=str(sample_release), out=str(tmp_path_factory.mktemp("stats") / "out"))
    for entry in catalog_release(cfg.source.release, batch_lines=cfg.batches.batch_lines):
        for i in range(len(entry.batch_offsets) - 1):
            build_batch(entry, i, BatchWork.of(cfg))
    return cfg.out


def test_numbers_match_the_manifests(out: str) -> None:
    from vlmforge.tasks.ops.query import run_query

    report = compute_stats(out)
    by = {s.subset: s for s in report.subsets}
    assert set(by) == {"bad_rows", "multi_image", "photo_vqa", "video_qa"}
    t = run_query(
        out,
        "SELECT subset, status, n_images, n_videos, text_tokens, visual_tokens, total_tokens FROM samples",
    )
    rows = t.to_pylist()
    for name, s in by.items():
        mine = [r for r in rows if r["subset"] == name]
        ok = [r for r in mine if r["status"] == "ok"]
        assert (s.rows, s.ok) == (len(mine), len(ok)) and s.rows == s.ok + s.rejected + s.dropped
        assert (s.images, s.videos) == (sum(r["n_images"] for r in ok), sum(r["n_videos"] for r in ok))
        for col, d in (("text_tokens", s.text), ("visual_tokens", s.visual), ("total_tokens", s.total)):
            vals = sorted(r[col] for r in ok)
            assert d.sum == sum(vals) and d.max == vals[-1]
            # nearest-rank percentiles (DuckDB quantile_disc): the ceil(q * n)-th smallest value
            assert d.p50 == vals[int(np.ceil(0.5 * len(vals))) - 1]
            assert d.p95 == vals[int(np.ceil(0.95 * len(vals))) - 1]
            assert vals[0] <= d.p50 <= d.p95 <= d.max
        assert sum(s.images_per_sample.values()) == s.ok
        assert sorted(s.total_tokens.tolist()) == sorted(r["total_tokens"] for r in ok)
    assert by["multi_image"].images_per_sample[12] == 1  # the 12-image sample
    assert by["multi_image"].resized_images >= 1  # the 27 MP photo was resized
    assert by["bad_rows"].rejected >= 10 and by["video_qa"].videos == 3
    assert [s.subset for s in compute_stats(out, ["photo_vqa"]).subsets] == ["photo_vqa"]
    with pytest.raises(ConfigError, match="nope"):
        compute_stats(out, ["nope"])
    with pytest.raises(OutputError, match="no manifests"):
        compute_stats(str(Path(out).parent / "missing"))


def test_html_report_is_self_contained(out: str, tmp_path: Path) -> None:
    report = write_stats_report(out)
    assert report.html_path == f"{out}/reports/stats.html"
    page = Path(report.html_path).read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"] * page.count("<svg")
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 3 * len(report.subsets)  # token lengths, images per sample, pixels per subset
    for svg in svgs:
        ET.fromstring(svg)  # well-formed
    for section in ("Token length distribution", "Images per sample", "Image pixels before / after resize"):
        assert section in page
    for s in report.subsets:
        assert f"<td>{s.subset}</td>" in page
    # the resized photo is a point below the diagonal (red)
    assert 'fill="#e45756" fill-opacity' in page
    custom = write_stats_report(out, str(tmp_path / "r.html"), ["video_qa"])
    assert (
        Path(custom.html_path or "").is_file() and "photo_vqa" not in Path(custom.html_path or "").read_text()
    )


def test_names_are_escaped_and_empty_plots_render() -> None:
    from vlmforge.tasks.ops.stats.compute import Dist, StatsReport, SubsetStats

    d = Dist(0, 0, 0, 0)
    s = SubsetStats("<b>x</b>", 1, 0, 1, 0, 0, 0, d, d, d, {})
    page = render_html(StatsReport(out="o&<", subsets=[s]))
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page and "o&amp;&lt;" in page
    assert page.count("no data") == 3
    ET.fromstring(svg_histogram(np.array([5, 5, 5]), "one value", "tokens"))


def test_stats_command(out: str) -> None:
    from vlmforge.flows.cli.tokens import register

    app = typer.Typer(pretty_exceptions_enable=False)
    register(app)
    res = CliRunner().invoke(app, ["stats", out, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {s["subset"] for s in doc["subsets"]} == {"bad_rows", "multi_image", "photo_vqa", "video_qa"}
    assert doc["html"].endswith("reports/stats.html")
    multi = next(s for s in doc["subsets"] if s["subset"] == "multi_image")
    assert multi["images_per_sample"]["12"] == 1 and set(multi["total_tokens"]) == {
        "sum",
        "p50",
        "p95",
        "max",
    }
    res = CliRunner().invoke(app, ["stats", out])
    assert res.exit_code == 0 and "images per sample" in res.output and "report:" in res.output
