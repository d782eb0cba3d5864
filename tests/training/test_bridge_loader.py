"""Megatron-Bridge trains on the output as it stands (issue 19's proof).

The sample release goes through the real pipeline with ``--sample-format bridge`` (and Bridge's
``QwenVLTaskEncoder`` pixel bounds), then every published dataset is read the way a Bridge recipe reads it:
megatron-energon with Bridge's own ``ChatMLWebdataset`` (named by the dataset's ``.nv-meta/dataset.yaml``),
Bridge's ``ChatMLSample`` and ``cook_chatml_sample``, from the published 0.6.2 wheel (:mod:`bridge_wheel`).
No vlmforge code is on the reading side; the manifests are only the expected values.

Visual tokens are counted the way ``QwenVLTaskEncoder.process_vision`` counts them, on the LOADED
pixels: transformers' Qwen2-VL image processor called with ``min_pixels``/``max_pixels`` on a sample's
images, ``sum(prod(image_grid_thw)) // merge_size**2``. A video is what
``processor.video_processor(videos=frames, do_sample_frames=False)`` makes of its frames: frames padded to a
multiple of ``temporal_patch_size`` (``grid_t = ceil(n / 2)``), each frame resized by the same
``smart_resize`` within the video processor's default bounds (``Qwen2VLVideoProcessor.size``:
128*28*28 .. 768*28*28). The spatial grid comes from the image processor with those bounds, because the video
processor class itself needs torchvision.

``QwenVLTaskEncoder.encode_sample`` itself is not run: importing
``megatron.bridge.models.qwen_vl.data.energon`` needs megatron-core >= 0.18 (Python 3.12 wheels), triton and
transformers <= 5.12.1 (5.24's processor rejects the encoder's ``text=""`` call), and its video path needs
torchvision; none of that is in the project's venv (CI's neither).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from bridge_wheel import BridgeData, BridgeUnavailable, load_bridge_data, obtain_wheel, unload_bridge_data
from conftest import run_flow

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.ops.query import run_query

pytestmark = pytest.mark.slow

# QwenVLTaskEncoder's defaults (megatron/bridge/models/qwen_vl/data/energon.py) and Qwen2.5-VL's processor.
MIN_PIXELS, MAX_PIXELS = 200_704, 1_003_520
PATCH, MERGE, TEMPORAL = 14, 2, 2
# Qwen2VLVideoProcessor.size (transformers): the bounds process_vision's video call resizes frames within.
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28


@pytest.fixture(scope="session")
def bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeData]:
    """Bridge's ``task_encoder_utils`` and ``safe_pickle`` from the published wheel (skips, naming why,
    when the wheel cannot be downloaded or the modules cannot be imported)."""
    root = tmp_path_factory.mktemp("megatron-bridge")
    try:
        data = load_bridge_data(obtain_wheel(root / "wheel"), root / "src")
    except BridgeUnavailable as exc:
        pytest.skip(f"Megatron-Bridge data modules unavailable: {exc}")
    try:
        yield data
    finally:
        unload_bridge_data(data.finder)


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


# ------------------------------------------------------------------------------ the reading side


def _load_split(bridge: BridgeData, dataset: Path, split: str) -> list[Any]:
    """Every sample of one split part, once, through energon and the dataset's own yaml (no cookers)."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset

    errors: list[str] = []
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        global_error_handler=lambda exc, *a, **k: errors.append(repr(exc)),
    )
    ds = get_val_dataset(
        str(dataset),
        split_part=split,
        worker_config=wc,
        batch_size=None,  # energon yields single samples
        task_encoder=DefaultTaskEncoder(),
    )
    samples = list(get_loader(ds))
    assert errors == [], (dataset, split, errors)
    return samples


@pytest.fixture(scope="module")
def loaded(bridge_run: Path, bridge: BridgeData) -> dict[str, dict[str, Any]]:
    """subset -> key -> the ``ChatMLSample`` Bridge's loader yields, over every published dataset."""
    out: dict[str, dict[str, Any]] = {}
    for meta in sorted((bridge_run / "energon").glob("*/.nv-meta")):
        dataset = meta.parent
        spec = yaml.safe_load((meta / "dataset.yaml").read_text())
        assert (spec["__module__"], spec["__class__"]) == (
            "megatron.bridge.data.energon.task_encoder_utils",
            "ChatMLWebdataset",
        ), dataset
        by_key: dict[str, Any] = {}
        for split, shards in yaml.safe_load((meta / "split.yaml").read_text())["split_parts"].items():
            if not shards:
                continue
            for sample in _load_split(bridge, dataset, split):
                assert sample.__key__ not in by_key, f"{sample.__key__} loaded twice"
                by_key[sample.__key__] = sample
        out[dataset.name] = by_key
    return out


def _manifest(out: Path) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, int], list[dict[str, Any]]]]:
    """The expected side: ok sample rows by key, and their media rows by (subset, line) in part order."""
    samples = run_query(str(out), "SELECT * FROM samples WHERE status = 'ok'").to_pylist()
    media = run_query(
        str(out),
        "SELECT m.* FROM media m JOIN samples s USING (subset, line) WHERE s.status = 'ok' ORDER BY ALL",
    ).to_pylist()
    by_line: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for m in sorted(media, key=lambda m: (m["subset"], m["line"], m["index"])):
        by_line.setdefault((m["subset"], m["line"]), []).append(m)
    return {r["key"]: r for r in samples}, by_line


def _parts(turns: list[dict[str, Any]], kind: str) -> int:
    return sum(
        1
        for turn in turns
        if isinstance(turn["content"], list)
        for part in turn["content"]
        if isinstance(part, dict) and part.get("type") == kind
    )


# ---------------------------------------------------------------------------------------- tests


def test_every_ok_sample_loads_as_a_chatml_sample_and_cooks(
    bridge: BridgeData, bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    tem = bridge.task_encoder_utils
    ok, _ = _manifest(bridge_run)
    assert ok and {k for by_key in loaded.values() for k in by_key} == set(ok)  # each ok sample, nothing else
    kinds = {"image": 0, "video": 0}
    for subset, by_key in loaded.items():
        assert by_key, f"{subset}: no samples"
        for key, sample in by_key.items():
            row = ok[key]
            assert isinstance(sample, tem.ChatMLSample) and row["subset"] == subset
            turns = tem.cook_chatml_sample(sample.conversation)
            assert turns and all(t["role"] in {"system", "user", "assistant"} for t in turns), key
            imgs, videos = sample.imgs or [], sample.videos or []
            assert _parts(turns, "image") == len(imgs) == row["n_images"], key
            assert _parts(turns, "video") == len(videos) == row["n_videos"], key
            kinds["image"] += len(imgs)
            kinds["video"] += len(videos)
            text = json.dumps(turns)
            assert "<image>" not in text and "<video>" not in text, key  # media only as typed parts
    assert kinds["image"] > 0 and kinds["video"] > 0, kinds  # the release exercises both


def test_images_and_video_frames_decode_upright_at_the_manifest_size(
    bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    ok, media = _manifest(bridge_run)
    by_ref: dict[str, Any] = {}
    for by_key in loaded.values():
        for key, sample in by_key.items():
            rows = media[(ok[key]["subset"], ok[key]["line"])]
            images = iter(sample.imgs or [])
            videos = iter(sample.videos or [])
            for m in rows:
                size = (m["out_height"], m["out_width"])
                if m["kind"] == "image":
                    img = next(images)
                    assert tuple(img.shape) == (3, *size), (key, m["ref"], tuple(img.shape), size)
                    assert float(img.min()) >= 0.0 and float(img.max()) <= 1.0
                    by_ref[f"{m['subset']}/{m['ref']}"] = img
                else:
                    frames = next(videos)
                    assert len(frames) == m["sampled_frames"] == len(m["frame_indices"]), (key, m["ref"])
                    for frame in frames:
                        assert tuple(frame.shape) == (3, *size), (key, m["ref"], tuple(frame.shape), size)
                # displayed orientation: a portrait source stays portrait, a landscape one landscape
                if m["width"] != m["height"]:
                    assert (m["width"] > m["height"]) == (size[1] > size[0]), (key, m["ref"])
            assert next(images, None) is None and next(videos, None) is None, key
    # The EXIF Orientation=6 rocket arrives as the upright rocket's pixels, not turned or upside down.
    upright, exif = by_ref["photo_vqa/images/rocket.jpg"], by_ref["photo_vqa/images/rocket_exif6.jpg"]
    assert upright.shape == exif.shape
    same = float((upright - exif).abs().mean())
    assert same < 0.03 < float((upright - exif.flip(1, 2)).abs().mean()), same


def _image_processor() -> Any:
    """transformers' Qwen2-VL image processor built in code (no hub): the PIL one, as transformers itself
    falls back to without torchvision."""
    import transformers

    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor
    return cls(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL)


def _grid_tokens(processor: Any, pils: list[Any], min_pixels: int, max_pixels: int) -> list[int]:
    """Per image: ``prod(image_grid_thw) // merge_size**2``, from one processor call over ``pils``."""
    if not pils:
        return []
    with warnings.catch_warnings():  # min_pixels/max_pixels call kwargs: deprecated, still what Bridge passes
        warnings.simplefilter("ignore", FutureWarning)
        grid = processor(images=pils, min_pixels=min_pixels, max_pixels=max_pixels, return_tensors="pt")
    return [int(t) // MERGE**2 for t in grid["image_grid_thw"].prod(-1)]


def _pil(tensor: Any) -> Any:
    """A decoded CHW float tensor as an RGB PIL image (what Bridge's ``normalize_energon_vlm_sample`` hands
    the processor)."""
    from PIL import Image

    arr = (tensor.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    return Image.fromarray(arr, "RGB")


def test_visual_tokens_equal_the_qwen_vl_encoders_count_on_the_loaded_pixels(
    bridge_run: Path, loaded: dict[str, dict[str, Any]]
) -> None:
    processor = _image_processor()
    ok, media = _manifest(bridge_run)
    mismatches: list[str] = []
    for by_key in loaded.values():
        for key, sample in sorted(by_key.items()):
            row = ok[key]
            rows = media[(row["subset"], row["line"])]
            image_rows = [m for m in rows if m["kind"] == "image"]
            video_rows = [m for m in rows if m["kind"] == "video"]
            per_image = _grid_tokens(processor, [_pil(t) for t in sample.imgs or []], MIN_PIXELS, MAX_PIXELS)
            per_video = []
            for frames in sample.videos or []:
                spatial = _grid_tokens(processor, [_pil(frames[0])], VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS)[0]
                assert all(f.shape == frames[0].shape for f in frames)
                per_video.append(math.ceil(len(frames) / TEMPORAL) * spatial)
            expected = [m["visual_tokens"] for m in image_rows] + [m["visual_tokens"] for m in video_rows]
            if per_image + per_video != expected or sum(per_image + per_video) != row["visual_tokens"]:
                got = per_image + per_video
                mismatches.append(
                    f"{key}: encoder images {per_image} videos {per_video} (sum {sum(got)}); "
                    f"manifest {expected} (sample {row['visual_tokens']})"
                )
    assert mismatches == []


def test_the_metadataset_a_bridge_recipe_takes_blends_every_subset(
    bridge: BridgeData, bridge_run: Path
) -> None:
    """``OUT/energon/metadataset.yaml`` as a recipe's data path: energon's training loader over the blend."""
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_train_dataset

    ok, _ = _manifest(bridge_run)
    errors: list[str] = []
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        global_error_handler=lambda exc, *a, **k: errors.append(repr(exc)),
    )
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
