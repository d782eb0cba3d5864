"""Sequence plan: exact first-fit-decreasing, packs never exceed seq_len, the plan manifest on the sample
release, and the ``plan`` / ``tokens`` commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.schemas.tables import PLAN
from vlmforge.tasks.errors import ConfigError
from vlmforge.tasks.ops.plan.ffd import first_fit_decreasing, pack_stats
from vlmforge.tasks.ops.plan.packing import build_plan
from vlmforge.tasks.ops.plan.table import pack_order, read_plan


def _reference_ffd(lengths: list[int], capacity: int) -> list[int]:
    """Textbook first-fit-decreasing, one item at a time."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    rooms: list[int] = []
    out = [-1] * len(lengths)
    for i in order:
        if lengths[i] > capacity:
            continue
        for b, room in enumerate(rooms):
            if room >= lengths[i]:
                rooms[b] -= lengths[i]
                out[i] = b
                break
        else:
            rooms.append(capacity - lengths[i])
            out[i] = len(rooms) - 1
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=1, max_value=400).flatmap(
        lambda cap: st.tuples(
            st.just(cap), st.lists(st.integers(min_value=1, max_value=cap + 50), min_size=0, max_size=300)
        )
    )
)
def test_ffd_is_exact_and_never_overflows(case: tuple[int, list[int]]) -> None:
    capacity, lengths = case
    packs = first_fit_decreasing(lengths, capacity)
    assert packs.tolist() == _reference_ffd(lengths, capacity)
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size:
        fits = packs >= 0
        assert (fits == (arr <= capacity)).all()  # every item that fits is placed, the others are not
        assert (np.bincount(packs[fits], weights=arr[fits]) <= capacity).all() if fits.any() else True


def test_ffd_many_equal_lengths_and_blocks() -> None:
    # > 1024 packs exercises the block index; runs of equal lengths fill packs in order
    rng = np.random.default_rng(3)
    lengths = rng.choice([300, 1000, 4300, 5000, 8000], 2_600).astype(np.int64)
    packs = first_fit_decreasing(lengths, 8192)
    assert packs.tolist() == _reference_ffd(lengths.tolist(), 8192)
    assert np.bincount(packs, weights=lengths).max() <= 8192
    with pytest.raises(ValueError, match=">= 1"):
        first_fit_decreasing([3, 0], 10)


def test_pack_stats_offsets() -> None:
    lengths = np.array([3, 5, 2, 5], dtype=np.int64)
    packs = first_fit_decreasing(lengths, 10)  # 5, 5 | 3, 2
    index, offset = pack_stats(lengths, packs)
    assert packs.tolist() == [1, 0, 1, 0]
    assert index.tolist() == [0, 0, 1, 1] and offset.tolist() == [0, 0, 3, 5]


# --------------------------------------------------------------------------------------- sample release


@pytest.fixture(scope="module")
def out(sample_release: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release

    cfg = RunConfig(release=str(sample_release), out=str(tmp_path_factory.mktemp("plan") / "out"))
    for entry in catalog_release(cfg.source.release, batch_lines=cfg.batches.batch_lines):
        for i in range(len(entry.batch_offsets) - 1):
            build_batch(entry, i, BatchWork.of(cfg))
    return cfg.out


def _ok_samples(out: str) -> dict[tuple[str, int], int]:
    from vlmforge.tasks.ops.query import run_query

    t = run_query(out, "SELECT subset, line, total_tokens FROM samples WHERE status = 'ok'")
    return {
        (s, ln): tok for s, ln, tok in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True)
    }


def _plan_rows(out: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for p in sorted(Path(out, "manifests", "plan").glob("subset=*/part-*.parquet")):
        rows += pq.read_table(p, schema=PLAN).to_pylist()
    return rows


def test_plan_per_subset_on_sample_release(out: str) -> None:
    ok = _ok_samples(out)
    result = build_plan(out, 4096, pad_multiple=64)
    rows = _plan_rows(out)
    too_long = {k for k, v in ok.items() if -(-v // 64) * 64 > 4096}
    assert result.too_long == len(too_long) >= 1  # the 12-image sample with the 27 MP photo does not fit
    assert {(r["subset"], r["line"]) for r in rows} == set(ok) - too_long  # every fitting ok sample, once
    assert len(rows) == result.samples
    by_pack: dict[int, list[dict[str, object]]] = {}
    for r in rows:
        by_pack.setdefault(int(r["pack"]), []).append(r)  # type: ignore[call-overload]
    assert len(by_pack) == result.packs and sorted(by_pack) == list(range(result.packs))
    for members in by_pack.values():
        assert len({m["subset"] for m in members}) == 1 and len({m["split"] for m in members}) == 1
        assert sum(int(m["padded_tokens"]) for m in members) <= 4096  # type: ignore[call-overload]
        offsets = sorted((int(m["pack_offset"]), int(m["padded_tokens"])) for m in members)  # type: ignore[call-overload]
        assert all(a[0] + a[1] == b[0] for a, b in zip(offsets, offsets[1:], strict=False))  # back to back
    assert result.tokens == sum(ok[(str(r["subset"]), int(r["line"]))] for r in rows)  # type: ignore[call-overload]
    assert result.efficiency == pytest.approx(result.tokens / (result.packs * 4096))
    assert result.padding_waste + result.tail_waste + result.efficiency == pytest.approx(1.0)


def test_plan_mix_and_stale_parts(out: str) -> None:
    subsets = sorted({s for s, _ in _ok_samples(out)})
    mixed = build_plan(out, 32768, scope="mix")
    assert [g.name for g in mixed.groups] == ["mix"] and mixed.too_long == 0
    rows = _plan_rows(out)
    assert {r["scope"] for r in rows} == {"mix"} and {r["subset"] for r in rows} == set(subsets)
    assert mixed.packs == 1  # everything fits one 32k sequence: subsets share packs
    # a plan of one subset replaces the previous plan: no stale parts of the others stay behind
    only = build_plan(out, 8192, subsets=["photo_vqa"])
    assert {r["subset"] for r in _plan_rows(out)} == {"photo_vqa"} and only.samples == 10
    order = pack_order(out, "photo_vqa")
    plan = read_plan(out, "photo_vqa")
    assert sorted(order) == sorted(plan.column("line").to_pylist())
    assert list(order.values()) == sorted(order.values())  # read_plan is in pack order
    assert read_plan(out, "video_qa").num_rows == 0


def test_plan_bad_options(out: str) -> None:
    with pytest.raises(ConfigError, match="seq-len"):
        build_plan(out, 0)
    with pytest.raises(ConfigError, match="pad-multiple"):
        build_plan(out, 4096, pad_multiple=0)
    with pytest.raises(ConfigError, match="no_such_subset"):
        build_plan(out, 4096, subsets=["no_such_subset"])


# ------------------------------------------------------------------------------------------------ CLI


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    from vlmforge.flows.cli.tokens import register

    application = typer.Typer(pretty_exceptions_enable=False)
    register(application)
    return application


def test_plan_command(out: str, app: typer.Typer) -> None:
    res = CliRunner().invoke(app, ["plan", out, "--seq-len", "4096", "--pad-multiple", "64", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["seq_len"] == 4096 and doc["packs"] >= 1 and 0 < doc["efficiency"] <= 1
    res = CliRunner().invoke(app, ["plan", out, "--seq-len", "4096"])
    assert res.exit_code == 0 and "packing efficiency" in res.output and "not in the plan" in res.output


def test_tokens_command(app: typer.Typer) -> None:
    args = ["tokens", "--model", "qwen3_vl", "--image", "1920x1080", "--image", "640x480"]
    res = CliRunner().invoke(app, [*args, "--video", "1280x720:300@30", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {
        "model": "qwen3_vl",
        "images": [2040, 300],
        "videos": [8800],
        "visual_tokens": 11140,
    }
    res = CliRunner().invoke(
        app, ["tokens", "--model", "qwen2_5_vl", "--max-pixels", "1003520", "--image", "1920x1080", "--json"]
    )
    assert json.loads(res.output)["images"] == [1222]
    res = CliRunner().invoke(app, ["tokens", "--model", "internvl", "--image", "800x600", "--json"])
    assert json.loads(res.output)["images"] == [13 * 256]
    res = CliRunner().invoke(app, ["tokens", "--model", "llava_next", "--image", "640x480"])
    assert res.exit_code == 0 and "2,340" in res.output
    for bad in (["--image", "1920by1080"], ["--video", "1280x720:0@30"], ["--image", "10x2500"], []):
        res = CliRunner().invoke(app, ["tokens", "--model", "qwen3_vl", *bad])
        assert res.exit_code == 2, (bad, res.output)
    res = CliRunner().invoke(app, ["tokens", "--model", "llava_1_5", "--video", "640x480:10@10"])
    assert res.exit_code == 2 and "no video" in res.output
