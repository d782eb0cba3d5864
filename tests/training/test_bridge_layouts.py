"""The three benchmark-set layouts (Mantis-Instruct, InfoVQA, LLaVA-Video-178K) load through Megatron-Bridge's
own loader (issue 19's "done when").

Small replicas of each layout are built at test time (the builders of ``tests/catalog/test_sources.py``: real
images, a real video, the published field names, and rows that must be rejected), each staged and run through
the real pipeline with ``--format <layout> --trainer bridge-qwen2.5-vl`` (Bridge's default sample format,
the ``QwenVLTaskEncoder`` knobs, video frames at the model's frame size) into one output folder: ``vlmforge
run`` takes one ``--format`` per run, so the module makes three runs and checks their datasets together.
Every ok sample is then read through the real Bridge wheel's ``ChatMLWebdataset`` (:mod:`bridge_checks`): it
loads as a ``ChatMLSample``, cooks with ``cook_chatml_sample``, has as many image/video parts as decoded
images/videos, decodes upright at the manifest's size, and its visual tokens equal the Qwen encoder's count on
the loaded pixels. The same replicas are also run with ``--trainer bridge-qwen3-vl``; for both trainers,
Bridge's real ``QwenVLTaskEncoder`` (``encode_sample`` and ``batch()``, :mod:`bridge_fed_checks`) reads every
published sample, and the manifests' fed and checked token counts must be its own (issue 32).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from bridge_checks import (
    bridge_session,
    check_frames_upright,
    check_loads_and_cooks,
    load_published,
    manifest,
    token_mismatches,
)
from bridge_fed_checks import (
    check_mismatches,
    cut_mismatches,
    fed_mismatches,
    layout_mismatches,
)
from bridge_runs import LAYOUTS, QWEN3_TRAINER, TRAINER
from bridge_wheel import BridgeData

from vlmforge.schemas.trainers import TRAINERS
from vlmforge.tasks.ops.query import run_query
from vlmforge.tasks.publish.splits import metadataset_val_problem

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeData]:
    """Bridge's data modules from the published wheel (skips, naming why, when they cannot be had)."""
    with bridge_session(tmp_path_factory) as data:
        yield data


@pytest.fixture(scope="module")
def layouts_run(bridge: BridgeData, bridge_layout_runs: dict[str, Path]) -> Path:
    """Each layout's replica staged and run with ``--trainer bridge-qwen2.5-vl`` into one output folder (a
    session fixture: tests/conftest.py, tests/training/bridge_runs.py)."""
    return bridge_layout_runs[TRAINER]


@pytest.fixture(scope="module")
def qwen3_layouts_run(bridge: BridgeData, bridge_layout_runs: dict[str, Path]) -> Path:
    """The same replicas run with ``--trainer bridge-qwen3-vl`` (its fed path differs most on videos)."""
    return bridge_layout_runs[QWEN3_TRAINER]


@pytest.fixture(scope="module")
def loaded(layouts_run: Path, bridge: BridgeData) -> dict[str, dict[str, Any]]:
    return load_published(layouts_run)


def test_every_layouts_ok_samples_load_as_chatml_samples_and_cook(
    bridge: BridgeData, layouts_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    kinds = check_loads_and_cooks(bridge, layouts_run, loaded)
    assert {subset: len(by_key) for subset, by_key in loaded.items()} == {
        subset: n for _, subset, n in LAYOUTS.values()
    }
    # Mantis: 2 + 1 images, InfoVQA: 2, LLaVA-Video: one video per sample.
    assert kinds == {"image": 5, "video": 2}, kinds
    twelve = run_query(
        str(layouts_run), "SELECT status, reason FROM samples WHERE subset = 'nlvr2' AND line = 2"
    )
    assert [(r["status"], r["reason"].split(":")[0]) for r in twelve.to_pylist()] == [
        ("dropped", "max_num_images")
    ]


def test_every_layouts_media_decode_upright_at_the_manifest_size(
    layouts_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    by_ref = check_frames_upright(layouts_run, loaded)
    ok, media = manifest(layouts_run)
    tall = [m for rows in media.values() for m in rows if m["subset"] == "infovqa_train" and m["line"] == 1]
    # InfoVQA's 400x2400 infographic stays a tall image (resized within Bridge's max_pixels, not turned).
    assert len(tall) == 1 and tall[0]["out_height"] > 4 * tall[0]["out_width"], tall
    assert by_ref  # images were checked, not only videos


def test_every_layouts_visual_tokens_equal_the_qwen_vl_encoders_count(
    layouts_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    assert token_mismatches(layouts_run, loaded) == []


@pytest.fixture(scope="module")
def fed_probe(
    bridge_probed: dict[str, dict[str, dict[str, dict[str, Any]]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """trainer -> key -> what Bridge's real QwenVLTaskEncoder (encode_sample, batch) did with each published
    sample (issue 32): the session's one probe process over every Bridge test output."""
    return bridge_probed["layouts"]


@pytest.mark.parametrize("trainer", [TRAINER, QWEN3_TRAINER])
def test_every_layouts_tokens_are_what_bridges_batch_feeds(
    trainer: str, layouts_run: Path, qwen3_layouts_run: Path, fed_probe: dict[str, dict[str, dict[str, Any]]]
) -> None:
    """visual_tokens per image / video / sample and total_tokens are the pad ids and sequence Bridge's
    batch() feeds; encode_check_visual_tokens is what its encode_sample checks; the --seq-len truncation
    points are where batch() puts them and a cut is kept exactly when batch() still trains the sample;
    encode_sample keeps every published sample."""
    out = layouts_run if trainer == TRAINER else qwen3_layouts_run
    probed = fed_probe[trainer]
    assert fed_mismatches(out, probed) == []
    assert check_mismatches(out, probed) == []
    assert layout_mismatches(out, probed, trainer) == []
    wrong, compared = cut_mismatches(out, probed, trainer)
    assert wrong == [] and compared > 0
    ok, media = manifest(out)
    assert len(ok) == sum(n for _, _, n in LAYOUTS.values())
    assert {k for k, r in probed.items() if r["status"] == "ok"} == set(ok)
    assert any(m["kind"] == "video" for rows in media.values() for m in rows)


def test_the_metadataset_has_a_val_split_exactly_where_subsets_have_val_samples(layouts_run: Path) -> None:
    """``--trainer`` holds out 5% by key hash: the recipe's data path blends val over the subsets that got
    val samples, and the run reports a missing val split only when none did."""
    ok, _ = manifest(layouts_run)
    val_subsets = {row["subset"] for row in ok.values() if row["split"] == "val"}
    energon = layouts_run / "energon"
    doc = yaml.safe_load((energon / "metadataset.yaml").read_text())
    blend = doc["splits"].get("val", {}).get("blend", [])
    assert {entry["path"].removeprefix("./") for entry in blend} == val_subsets
    fraction = TRAINERS[TRAINER]["val_fraction"]
    assert (metadataset_val_problem(energon, fraction) is None) == bool(val_subsets)
