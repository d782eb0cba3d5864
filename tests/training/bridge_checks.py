"""The reading side of the Megatron-Bridge tests, shared by every output they check (the sample release, the
benchmark-set layouts): Bridge's own loader over a run's published datasets, and the checks a Bridge recipe
implies, with the run's manifests as the only expected values.

Visual tokens are counted the way ``QwenVLTaskEncoder.process_vision`` counts them, on the LOADED pixels:
transformers' Qwen2-VL image processor called with ``min_pixels``/``max_pixels`` on a sample's images,
``sum(prod(image_grid_thw)) // merge_size**2``. A video is what
``processor.video_processor(videos=frames, do_sample_frames=False)`` makes of its frames: frames padded to a
multiple of ``temporal_patch_size`` (``grid_t = ceil(n / 2)``), each frame resized by the same
``smart_resize`` within the video processor's default bounds (``Qwen2VLVideoProcessor.size``:
128*28*28 .. 768*28*28). The spatial grid comes from the image processor with those bounds, because the video
processor class itself needs torchvision.

Bridge's wheel is obtained once per test process and its modules are loaded for as long as a test module
needs them (:func:`bridge_session`): the finder that serves them refuses a second copy, and tests after them
check that vlmforge works without ``megatron.bridge``.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from bridge_wheel import BridgeData, BridgeUnavailable, load_bridge_data, obtain_wheel, unload_bridge_data
from conftest import error_collecting_worker_config

from vlmforge.tasks.ops.query import run_query

__all__ = [
    "MAX_PIXELS",
    "MIN_PIXELS",
    "bridge_session",
    "check_frames_upright",
    "check_loads_and_cooks",
    "load_published",
    "manifest",
    "token_mismatches",
]

# QwenVLTaskEncoder's defaults (megatron/bridge/models/qwen_vl/data/energon.py) and Qwen2.5-VL's processor.
MIN_PIXELS, MAX_PIXELS = 200_704, 1_003_520
PATCH, MERGE, TEMPORAL = 14, 2, 2
# Qwen2VLVideoProcessor.size (transformers): the bounds process_vision's video call resizes frames within.
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 128 * 28 * 28, 768 * 28 * 28

Manifest = tuple[dict[str, dict[str, Any]], dict[tuple[str, int], list[dict[str, Any]]]]

# ------------------------------------------------------------------------------ Bridge, once per process

_STATE: dict[str, Any] = {"wheel": None, "data": None, "why": None, "users": 0}


@contextmanager
def bridge_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeData]:
    """Bridge's ``task_encoder_utils`` and ``safe_pickle`` from the published wheel, shared by the users
    inside this context and unloaded when the last one leaves (so a module's fixture leaves no
    ``megatron.bridge`` behind for the tests after it). The wheel is obtained once per process; when it
    cannot be had, or the modules not imported, this skips naming why, and remembers why."""
    if _STATE["why"] is not None:
        pytest.skip(_STATE["why"])
    if _STATE["data"] is None:
        root = tmp_path_factory.mktemp("megatron-bridge")
        try:
            if _STATE["wheel"] is None:
                _STATE["wheel"] = obtain_wheel(root / "wheel")
            _STATE["data"] = load_bridge_data(_STATE["wheel"], root / "src")
        except BridgeUnavailable as exc:
            _STATE["why"] = f"Megatron-Bridge data modules unavailable: {exc}"
            pytest.skip(_STATE["why"])
    _STATE["users"] += 1
    try:
        yield _STATE["data"]
    finally:
        _STATE["users"] -= 1
        if _STATE["users"] == 0:
            unload_bridge_data(_STATE["data"].finder)
            _STATE["data"] = None


# ------------------------------------------------------------------------------ the reading side


def _load_split(dataset: Path, split: str) -> list[Any]:
    """Every sample of one split part, once, through energon and the dataset's own yaml (no cookers)."""
    from megatron.energon import DefaultTaskEncoder, get_loader, get_val_dataset

    wc, errors = error_collecting_worker_config()
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


def load_published(out: Path) -> dict[str, dict[str, Any]]:
    """subset -> key -> the ``ChatMLSample`` Bridge's loader yields, over every published dataset of ``out``
    (each must name Bridge's ``ChatMLWebdataset`` in its ``.nv-meta/dataset.yaml``)."""
    loaded: dict[str, dict[str, Any]] = {}
    for meta in sorted((out / "energon").glob("*/.nv-meta")):
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
            for sample in _load_split(dataset, split):
                assert sample.__key__ not in by_key, f"{sample.__key__} loaded twice"
                by_key[sample.__key__] = sample
        loaded[dataset.name] = by_key
    return loaded


def manifest(out: Path) -> Manifest:
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


# ------------------------------------------------------------------------------------------ checks


def check_loads_and_cooks(bridge: BridgeData, out: Path, loaded: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Every ok sample of ``out`` (and nothing else) loaded as a ``ChatMLSample`` of its subset; it cooks with
    ``cook_chatml_sample``; its image and video parts equal its decoded images and videos and its manifest
    counts; media appear only as typed parts. Returns the images and videos seen."""
    tem = bridge.task_encoder_utils
    ok, _ = manifest(out)
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
    return kinds


def check_frames_upright(out: Path, loaded: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each decoded image and video frame has its manifest row's output size (CHW floats in [0, 1]), a video
    its sampled frame count, and a portrait source stays portrait. Returns the images by ``subset/ref``."""
    ok, media = manifest(out)
    by_ref: dict[str, Any] = {}
    for by_key in loaded.values():
        for key, sample in by_key.items():
            rows = media.get((ok[key]["subset"], ok[key]["line"]), [])  # a text-only sample has none
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
    return by_ref


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


def token_mismatches(out: Path, loaded: dict[str, dict[str, Any]]) -> list[str]:
    """Samples whose visual tokens, per image, per video and in sum, differ between the Qwen encoder's
    ``encode_sample`` count on the loaded pixels and the manifest's ``encode_check_visual_tokens`` (one line
    each; empty when every sample agrees)."""
    processor = _image_processor()
    ok, media = manifest(out)
    mismatches: list[str] = []
    for by_key in loaded.values():
        for key, sample in sorted(by_key.items()):
            row = ok[key]
            rows = media.get((row["subset"], row["line"]), [])
            image_rows = [m for m in rows if m["kind"] == "image"]
            video_rows = [m for m in rows if m["kind"] == "video"]
            per_image = _grid_tokens(processor, [_pil(t) for t in sample.imgs or []], MIN_PIXELS, MAX_PIXELS)
            per_video = []
            for frames in sample.videos or []:
                spatial = _grid_tokens(processor, [_pil(frames[0])], VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS)[0]
                assert all(f.shape == frames[0].shape for f in frames)
                per_video.append(math.ceil(len(frames) / TEMPORAL) * spatial)
            # encode_sample's count (its max_visual_tokens check); batch()'s: test_bridge_fed_tokens.py
            col = "encode_check_visual_tokens"
            expected = [m[col] for m in image_rows] + [m[col] for m in video_rows]
            if per_image + per_video != expected or sum(per_image + per_video) != row[col]:
                got = per_image + per_video
                mismatches.append(
                    f"{key}: encoder images {per_image} videos {per_video} (sum {sum(got)}); "
                    f"manifest {expected} (sample {row[col]})"
                )
    return mismatches
