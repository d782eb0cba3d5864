"""End to end over the three source layouts (Mantis-Instruct, InfoVQA, LLaVA-Video-178K replicas): staged,
run through the whole flow (real Prefect harness, local Ray, Great Expectations) into one output folder,
the Energon metadataset loaded back through the cooker, per-stage times in the ``runs`` table, and a rerun
that re-reads no archive and yields the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import load_energon_samples, run_flow, tree_hashes
from test_sources import (
    INFOVQA_ROWS,
    LLAVA_CONFIG,
    LLAVA_VIDEO_ROWS,
    MANTIS_ROWS,
    build_infovqa,
    build_llava_video,
    build_mantis,
)

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.ops.query import run_query

pytestmark = pytest.mark.slow

# subset -> (format, config, rows, expected statuses by line)
LAYOUTS = {
    "nlvr2": ("mantis", "nlvr2", MANTIS_ROWS, ["ok", "ok", "rejected", "rejected", "ok"]),
    "infovqa_train": ("infovqa", "train", INFOVQA_ROWS, ["ok", "ok", "rejected", "rejected"]),
    LLAVA_CONFIG: ("llava_video", LLAVA_CONFIG, LLAVA_VIDEO_ROWS, ["ok", "ok", "rejected", "rejected"]),
}


def _cfg(release: Path, out: Path, fmt: str, config: str) -> RunConfig:
    # The gate (Great Expectations) runs for the video layout and its rerun; the image layouts skip it to keep
    # the module short (the gate itself is covered over the sample release).
    return RunConfig(
        skip_gate=fmt != "llava_video",
        release=str(release),
        out=str(out),
        source_format=fmt,  # type: ignore[arg-type]
        source_configs=(config,),
        max_reject_rate=0.6,
        batch_lines=3,
        num_cpus=2,
    )


@pytest.fixture(scope="module")
def runs(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("layouts")
    releases = {
        "mantis": build_mantis(base / "Mantis-Instruct"),
        "infovqa": build_infovqa(base / "InfoVQA"),
        "llava_video": build_llava_video(base / "LLaVA-Video-178K", base / "videos"),
    }
    out = base / "out"
    summaries = {}
    for subset, (fmt, config, _, _) in LAYOUTS.items():
        summaries[subset] = run_flow(_cfg(releases[fmt], out, fmt, config))
    return out, {"summaries": summaries, "releases": releases}


def test_every_source_row_is_accounted_for_and_published(runs: tuple[Path, dict[str, Any]]) -> None:
    out, ctx = runs
    for subset, (fmt, _, rows, statuses) in LAYOUTS.items():
        summary = ctx["summaries"][subset]
        assert summary.failed == [], (subset, [s.gate for s in summary.subsets])
        (outcome,) = summary.subsets
        assert outcome.validation == "ok"
        got = run_query(
            str(out), f"SELECT line, status, reason FROM samples WHERE subset = '{subset}' ORDER BY line"
        ).to_pylist()
        assert [r["status"] for r in got] == statuses, (subset, got)
        sub = run_query(str(out), f"SELECT * FROM subsets WHERE subset = '{subset}'").to_pylist()[0]
        assert sub["rows"] == rows == sub["ok"] + sub["rejected"] + sub["dropped"]
        assert sub["release"] == str(ctx["releases"][fmt]) and sub["published"]
    reasons = {
        r["subset"]: r["reason"]
        for r in run_query(str(out), "SELECT subset, reason FROM samples WHERE status <> 'ok'").to_pylist()
        if r["reason"].startswith("placeholder_mismatch")
    }
    assert set(reasons) == set(LAYOUTS)  # a placeholder count mismatch is a reject in every layout
    missing = run_query(
        str(out), "SELECT subset, reason FROM samples WHERE reason LIKE 'missing_media%' ORDER BY subset"
    ).to_pylist()
    assert [r["subset"] for r in missing] == [LLAVA_CONFIG, "nlvr2"]
    lic = {
        r["subset"]: r["license"]
        for r in run_query(str(out), "SELECT subset, license FROM subsets").to_pylist()
    }
    assert lic["nlvr2"] == lic[LLAVA_CONFIG] == "Apache-2.0"


def test_media_went_through_verify_resize_and_the_store(runs: tuple[Path, dict[str, Any]]) -> None:
    out, _ = runs
    media = run_query(str(out), "SELECT * FROM media WHERE status = 'ok'").to_pylist()
    assert {m["source"] for m in media} == {"store"}
    tall = next(m for m in media if m["ref"].endswith("/infographic_101.png"))
    assert (tall["width"], tall["height"]) == (400, 2400) and tall["visual_tokens"] > 1000
    videos = [m for m in media if m["kind"] == "video"]
    assert len(videos) == 2 and all(m["sampled_frames"] >= 2 and m["frame_indices"] for m in videos)
    store = out / "store"
    for m in media:
        assert (store / m["out_sha256"][:2] / m["out_sha256"]).is_file()
    cut = run_query(
        str(out), "SELECT reason FROM samples WHERE subset = 'infovqa_train' AND line = 4"
    ).to_pylist()
    assert cut[0]["reason"].startswith("media_error")  # a truncated embedded JPEG fails verification
    twelve = run_query(
        str(out), "SELECT n_images FROM samples WHERE subset = 'nlvr2' AND line = 2"
    ).to_pylist()
    assert twelve == [{"n_images": 12}]


def test_metadataset_loads_every_layout_through_the_cooker(runs: tuple[Path, dict[str, Any]]) -> None:
    out, _ = runs
    samples, ok = load_energon_samples(out, 80)
    assert {sample.__key__ for sample in samples} == set(ok)


def test_stage_times_are_recorded_and_shown(runs: tuple[Path, dict[str, Any]]) -> None:
    from vlmforge.tasks.ops.stats.page import write_stats_report

    out, ctx = runs
    rows = run_query(str(out), "SELECT run_id, subset, stage, seconds, items FROM runs").to_pylist()
    assert len({r["run_id"] for r in rows}) == 3
    stages = {(r["subset"], r["stage"]) for r in rows}
    for subset in LAYOUTS:
        assert {(subset, s) for s in ("staging", "parse", "media", "tokens", "batches")} <= stages
    assert {
        ("_run", s) for s in ("staging", "catalog", "batches", "gate", "publish", "validate", "run")
    } <= stages
    report = write_stats_report(str(out))
    assert report.stage_run == ctx["summaries"][LLAVA_CONFIG].run_id
    assert {r["stage"] for r in report.stages} >= {"staging", "media", "run"}
    assert "Stage times of run" in Path(str(report.html_path)).read_text()


def test_plan_balance_visual_reports_the_encoder_load_ratio(runs: tuple[Path, dict[str, Any]]) -> None:
    from vlmforge.tasks.ops.plan.packing import build_plan
    from vlmforge.tasks.ops.plan.table import read_plan

    out, _ = runs
    r = build_plan(str(out), 2048, scope="mix", balance="visual", dp=2)
    assert r.balance is not None and r.balance.after_mean <= r.balance.before_mean
    plan = read_plan(str(out), "nlvr2").to_pylist()
    assert plan and all(p["step"] is not None and p["pack"] == p["step"] * 2 + p["rank"] for p in plan)


def test_rerun_reads_no_archive_and_yields_the_same_bytes(runs: tuple[Path, dict[str, Any]]) -> None:
    """Last in the module: it adds a run (the stage-times test reads the latest run)."""
    out, ctx = runs
    before = tree_hashes(out / "energon" / LLAVA_CONFIG)
    samples_before = tree_hashes(out / "manifests" / "samples")
    again = run_flow(_cfg(ctx["releases"]["llava_video"], out, "llava_video", LLAVA_CONFIG))
    (s,) = again.subsets
    assert s.stats.skipped_batches == s.stats.batches > 0
    staging = run_query(
        str(out),
        f"SELECT skipped, bytes FROM runs WHERE run_id = '{again.run_id}' AND stage = 'staging' "
        f"AND subset = '{LLAVA_CONFIG}'",
    ).to_pylist()
    assert staging == [{"skipped": 1, "bytes": 0}]
    assert tree_hashes(out / "energon" / LLAVA_CONFIG) == before
    assert tree_hashes(out / "manifests" / "samples") == samples_before
