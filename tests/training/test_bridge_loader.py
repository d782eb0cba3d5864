"""Megatron-Bridge trains on the output as it stands (issue 19's proof).

The sample release goes through the real pipeline with ``--sample-format bridge`` (and Bridge's
``QwenVLTaskEncoder`` pixel bounds), then every published dataset is read the way a Bridge recipe reads it:
megatron-energon with Bridge's own ``ChatMLWebdataset`` (named by the dataset's ``.nv-meta/dataset.yaml``),
Bridge's ``ChatMLSample`` and ``cook_chatml_sample``, from the published 0.6.2 wheel (:mod:`bridge_wheel`).
No vlmforge code is on the reading side; the manifests are only the expected values. The reading side and
the checks (visual tokens as ``QwenVLTaskEncoder.process_vision`` counts them on the loaded pixels) live in
:mod:`bridge_checks`, shared with the benchmark-set layouts' test (``test_bridge_layouts.py``).

``QwenVLTaskEncoder.encode_sample`` itself is not run: importing
``megatron.bridge.models.qwen_vl.data.energon`` needs megatron-core >= 0.18 (Python 3.12 wheels), triton and
transformers <= 5.12.1 (5.24's processor rejects the encoder's ``text=""`` call), and its video path needs
torchvision; none of that is in the project's venv (CI's neither).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bridge_checks import (
    MAX_PIXELS,
    MIN_PIXELS,
    bridge_session,
    check_frames_upright,
    check_loads_and_cooks,
    load_published,
    manifest,
    token_mismatches,
)
from bridge_wheel import BridgeData
from conftest import error_collecting_worker_config, run_flow

from vlmforge.schemas.config import RunConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeData]:
    """Bridge's data modules from the published wheel (skips, naming why, when they cannot be had)."""
    with bridge_session(tmp_path_factory) as data:
        yield data


def _run_has_sample_format() -> bool:
    """Whether ``vlmforge run --help`` offers ``--sample-format``."""
    import typer

    from vlmforge.flows.cli import app

    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    return any("--sample-format" in p.opts for p in run.params)


@pytest.fixture(scope="module")
def bridge_run(
    bridge: BridgeData, prefect_harness: None, sample_release: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The sample release run as ``vlmforge run --sample-format bridge --video-mode frames`` with Bridge's
    pixel bounds; the output folder."""
    if not _run_has_sample_format():
        pytest.skip(
            "vlmforge run has no --sample-format option yet (the bridge sample format has not landed)"
        )
    out = tmp_path_factory.mktemp("bridge-out") / "run"
    cfg = RunConfig(
        release=str(sample_release),
        out=str(out),
        max_reject_rate=0.9,
        batch_lines=4,
        sample_format="bridge",
        video_mode="frames",
        min_pixels=MIN_PIXELS,
        max_pixels=MAX_PIXELS,
    )
    summary = run_flow(cfg)
    assert summary.failed == []
    return out


@pytest.fixture(scope="module")
def loaded(bridge_run: Path, bridge: BridgeData) -> dict[str, dict[str, Any]]:
    """subset -> key -> the ``ChatMLSample`` Bridge's loader yields, over every published dataset."""
    return load_published(bridge_run)


# ---------------------------------------------------------------------------------------- tests


def test_every_ok_sample_loads_as_a_chatml_sample_and_cooks(
    bridge: BridgeData, bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    kinds = check_loads_and_cooks(bridge, bridge_run, loaded)
    assert kinds["image"] > 0 and kinds["video"] > 0, kinds  # the release exercises both


def test_images_and_video_frames_decode_upright_at_the_manifest_size(
    bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    by_ref = check_frames_upright(bridge_run, loaded)
    # The EXIF Orientation=6 rocket arrives as the upright rocket's pixels, not turned or upside down.
    upright, exif = by_ref["photo_vqa/images/rocket.jpg"], by_ref["photo_vqa/images/rocket_exif6.jpg"]
    assert upright.shape == exif.shape
    same = float((upright - exif).abs().mean())
    assert same < 0.03 < float((upright - exif.flip(1, 2)).abs().mean()), same


def test_visual_tokens_equal_the_qwen_vl_encoders_count_on_the_loaded_pixels(
    bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    assert token_mismatches(bridge_run, loaded) == []


def test_the_metadataset_a_bridge_recipe_takes_blends_every_subset(
    bridge: BridgeData, bridge_run: Path
) -> None:
    """``OUT/energon/metadataset.yaml`` as a recipe's data path: energon's training loader over the blend."""
    from megatron.energon import DefaultTaskEncoder, get_loader, get_train_dataset

    ok, _ = manifest(bridge_run)
    wc, errors = error_collecting_worker_config()
    ds = get_train_dataset(
        str(bridge_run / "energon" / "metadataset.yaml"),
        worker_config=wc,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=DefaultTaskEncoder(),
    )
    drawn = [sample for _, sample in zip(range(80), get_loader(ds), strict=False)]
    assert errors == [] and len(drawn) == 80
    assert all(isinstance(s, bridge.task_encoder_utils.ChatMLSample) and s.__key__ in ok for s in drawn)
    assert {ok[s.__key__]["subset"] for s in drawn} == {r["subset"] for r in ok.values()}
