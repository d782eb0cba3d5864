"""Change-driven reruns: the decision (pure) and a real rerun over the pipeline's own stages.

The rerun test builds OUT with the real stages the flow runs (catalog, build_batch, publish, metadataset;
no Prefect), changes one subset's README upstream, and checks that a refresh reruns exactly that subset:
every file of the others keeps its bytes and its mtime.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.catalog.refresh import (
    catalog_columns,
    change_reasons,
    last_run_options,
    license_allowed,
    parse_license_allow,
    plan_refresh,
    read_previous_catalog,
    split_by_license,
    unpublish_subset,
    write_subsets_row,
)
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.manifests import OutputLayout, remove_parts_from

SUBSETS = ("bad_rows", "photo_vqa", "video_qa")


def _entry(subset: str, **kw: Any) -> SubsetEntry:
    base: dict[str, Any] = dict(
        subset=subset,
        path=f"/r/{subset}",
        jsonl=f"/r/{subset}/{subset}.jsonl",
        readme_sha256="a" * 64,
        jsonl_sha256="b" * 64,
        jsonl_bytes=10,
        rows=2,
        license="CC-BY-4.0",
        license_text=None,
    )
    return SubsetEntry(**(base | kw))


def _prev(entry: SubsetEntry, **kw: Any) -> dict[str, Any]:
    return catalog_columns(entry, None, run_id="r0") | {"published": True, "gate": "passed"} | kw


# -------------------------------------------------------------------------------------------- decision


def test_plan_names_what_changed_and_why() -> None:
    same, readme, lic, jsonl, recipe, new = (
        _entry("same"),
        _entry("readme"),
        _entry("lic"),
        _entry("jsonl"),
        _entry("recipe", media_recipe_sha256="c" * 64),
        _entry("new"),
    )
    previous = {
        "same": _prev(same),
        "readme": _prev(readme, readme_sha256="0" * 64),
        "lic": _prev(lic, license="CC-BY-SA-4.0"),
        "jsonl": _prev(jsonl, jsonl_sha256="1" * 64, rows=1),
        "recipe": _prev(recipe, media_recipe_sha256="d" * 64),
        "gone": _prev(_entry("gone")),
    }
    plan = plan_refresh([same, readme, lic, jsonl, recipe, new], previous)
    assert plan.rerun == ["jsonl", "lic", "new", "readme", "recipe"]
    assert plan.unchanged == ["same"] and plan.unpublish == ["gone"]
    why = {c.subset: c.reasons for c in plan.changes}
    assert why["readme"] == ("README changed (sha256 00000000.. -> aaaaaaaa..)",)
    assert why["lic"] == ("license changed (CC-BY-SA-4.0 -> CC-BY-4.0)",)
    assert why["jsonl"] == ("JSONL changed (sha256 11111111.. -> bbbbbbbb.., rows 1 -> 2)",)
    assert why["recipe"] == ("media recipe changed (dddddddd.. -> cccccccc..)",)
    assert why["new"] == ("new subset",) and why["gone"] == ("removed upstream",)
    assert plan.lines()[0].startswith("jsonl: rerun (JSONL changed")
    assert plan.lines()[-1] == "same: unchanged (nothing changed upstream)"


def test_plan_options() -> None:
    e = _entry("s")
    held_back = {"s": _prev(e, published=False, gate="failed: reject rate"), "t": _prev(_entry("t"))}
    assert plan_refresh([e], held_back, only=["s"]).unchanged == ["s"]  # `only`: nothing unpublished
    assert plan_refresh([e], held_back, only=["s"], retry_unpublished=True).changes[0].reasons == (
        "last run was not published (failed: reject rate)",
    )
    # A manifest written before a column existed compares only what it has.
    old = {k: v for k, v in _prev(e).items() if k != "media_recipe_sha256"}
    assert change_reasons(_entry("s", media_recipe_sha256="f" * 64), old) == []


def test_license_history_is_carried_forward() -> None:
    e1 = _entry("s", license="CC-BY-4.0")
    row1 = catalog_columns(e1, None, run_id="r1", now="t1")
    assert row1["previous_license"] is None and row1["license_changed_at"] is None
    e2 = _entry("s", license="CC-BY-NC-4.0")
    row2 = catalog_columns(e2, row1, run_id="r2", now="t2")
    assert (
        row2["license"],
        row2["previous_license"],
        row2["license_changed_at"],
        row2["license_changed_run"],
    ) == (
        "CC-BY-NC-4.0",
        "CC-BY-4.0",
        "t2",
        "r2",
    )
    row3 = catalog_columns(e2, row2, run_id="r3", now="t3")  # unchanged: history kept
    assert (row3["previous_license"], row3["license_changed_at"], row3["license_changed_run"]) == (
        "CC-BY-4.0",
        "t2",
        "r2",
    )


def test_license_allow() -> None:
    allow = parse_license_allow(["CC-BY-4.0,cc-by-sa-*", " Apache-2.0 "])
    assert allow == ["CC-BY-4.0", "cc-by-sa-*", "Apache-2.0"]
    assert license_allowed("CC-BY-SA-4.0", allow) and license_allowed("apache-2.0", allow)
    assert not license_allowed("CC-BY-NC-4.0", allow) and not license_allowed("unknown", allow)
    assert license_allowed("unknown", ["unknown"]) and license_allowed("GPL-3.0", [])
    kept, excluded = split_by_license([_entry("a"), _entry("b", license="GPL-3.0")], ["CC-BY-4.0"])
    assert [e.subset for e in kept] == ["a"]
    assert excluded == [("b", "license GPL-3.0 not in --license-allow CC-BY-4.0")]


# ------------------------------------------------------------------------------------------ real rerun


def _run(release: Path, out: Path, subsets: list[str], run_id: str) -> None:
    """What the flow does for ``subsets``, with the pipeline's own stage functions (no Prefect, no Ray)."""
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.publish.publish import publish_metadataset, publish_subset

    cfg = RunConfig(release=str(release), out=str(out), batch_lines=4, max_reject_rate=0.9)
    layout = OutputLayout(str(out))
    previous = read_previous_catalog(layout)
    for e in catalog_release(str(release), subsets=subsets, batch_lines=4):
        n = len(e.batch_offsets) - 1
        remove_parts_from(layout, e.subset, n)
        for i in range(n):
            build_batch(e, i, BatchWork.of(cfg))
        publish_subset(
            layout,
            e.subset,
            shard_max_bytes=cfg.shards.shard_max_bytes,
            shard_max_samples=cfg.shards.shard_max_samples,
        )
        row = catalog_columns(e, previous.get(e.subset), run_id=run_id) | {
            "published": True,
            "gate": "skipped",
        }
        write_subsets_row(layout, row)
    publish_metadataset(layout)


def _snapshot(out: Path, skip: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    snap = {}
    for p in sorted(out.rglob("*")):
        rel = str(p.relative_to(out))
        if not p.is_file() or rel == "energon/metadataset.yaml" or any(s in rel for s in skip):
            continue
        snap[rel] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
    return snap


@pytest.fixture(scope="module")
def first_run(sample_release: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    release = tmp_path_factory.mktemp("upstream") / "release"
    for s in SUBSETS:
        shutil.copytree(sample_release / s, release / s)
    out = tmp_path_factory.mktemp("out") / "out"
    _run(release, out, list(SUBSETS), "run-1")
    return release, out


@pytest.mark.slow
def test_refresh_reruns_only_the_subset_whose_readme_changed(first_run: tuple[Path, Path]) -> None:
    release, out = first_run
    layout = OutputLayout(str(out))
    assert sorted(read_previous_catalog(layout)) == list(SUBSETS)
    others = _snapshot(out, skip=("photo_vqa", "store/"))
    assert any("energon/bad_rows/" in p for p in others) and any(
        "manifests/samples/subset=video_qa" in p for p in others
    )

    readme = release / "photo_vqa" / "README.md"
    readme.write_text(readme.read_text() + "\nErrata: question 3 was reworded upstream.\n")
    plan = plan_refresh(catalog_release(str(release), batch_lines=4), read_previous_catalog(layout))
    assert plan.rerun == ["photo_vqa"] and plan.unpublish == []
    assert plan.by_subset()["photo_vqa"].reasons[0].startswith("README changed (sha256 ")
    _run(release, out, plan.rerun, "run-2")

    assert _snapshot(out, skip=("photo_vqa", "store/")) == others  # same bytes, same mtimes
    rows = read_previous_catalog(layout)
    assert rows["photo_vqa"]["run_id"] == "run-2" and rows["bad_rows"]["run_id"] == "run-1"
    assert rows["photo_vqa"]["readme_sha256"] == hashlib.sha256(readme.read_bytes()).hexdigest()
    meta = (out / "energon" / "metadataset.yaml").read_text()
    assert all(f"./{s}" in meta for s in SUBSETS)


@pytest.mark.slow
def test_license_change_is_recorded_and_removed_subsets_are_unpublished(first_run: tuple[Path, Path]) -> None:
    from vlmforge.tasks.publish.publish import publish_metadataset

    release, out = first_run
    layout = OutputLayout(str(out))
    readme = release / "video_qa" / "README.md"
    readme.write_text(readme.read_text().replace("CC-BY-SA-4.0", "CC-BY-NC-4.0"))
    shutil.rmtree(release / "bad_rows")
    plan = plan_refresh(catalog_release(str(release), batch_lines=4), read_previous_catalog(layout))
    assert plan.rerun == ["video_qa"] and plan.unpublish == ["bad_rows"]
    assert "license changed (CC-BY-SA-4.0 -> CC-BY-NC-4.0)" in plan.by_subset()["video_qa"].reasons
    _run(release, out, plan.rerun, "run-3")
    for subset in plan.unpublish:
        assert unpublish_subset(layout, subset)
    publish_metadataset(layout)

    row = read_previous_catalog(layout)["video_qa"]
    assert (row["license"], row["previous_license"], row["license_changed_run"]) == (
        "CC-BY-NC-4.0",
        "CC-BY-SA-4.0",
        "run-3",
    )
    assert not (out / "energon" / "bad_rows").exists()
    meta = (out / "energon" / "metadataset.yaml").read_text()
    assert "./bad_rows" not in meta and "./video_qa" in meta
    assert not unpublish_subset(layout, "bad_rows")  # already gone: nothing to do


def test_last_run_options(tmp_path: Path) -> None:
    assert last_run_options(str(tmp_path)) is None
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "20260101T000000-aaaaaa.json").write_text('{"config": {"seq_len": 1}}')
    (tmp_path / "runs" / "20260102T000000-bbbbbb.json").write_text('{"config": {"seq_len": 2}}')
    assert last_run_options(str(tmp_path)) == {"seq_len": 2}
