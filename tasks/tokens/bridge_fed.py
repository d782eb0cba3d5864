"""What Megatron-Bridge's Qwen-VL batch path feeds the model: visual tokens as ``QwenVLTaskEncoder.batch()``
puts them in ``input_ids`` (Megatron-Bridge 0.6.2, transformers 5.12.1, qwen-vl-utils 0.0.14).

``encode_sample`` counts a sample's visual tokens with the processor on the stored pixels (what
:mod:`.count` computes: the number its ``max_visual_tokens`` check uses). ``batch()`` then calls
``qwen2_5_collate_fn``, which first passes every image and video through ``qwen_vl_utils.process_vision_info``
and only then through the processor, without ``do_sample_frames=False``. Measured against the real encoder
(``tests/training/test_bridge_fed_tokens.py``), that path differs in four ways, each a function here:

* images are resized twice: qwen-vl-utils' ``smart_resize`` at factor 28 (``process_vision_info`` is not told
  the patch size; 4..16384 tokens of 28x28), then the processor's at ``patch * merge`` within the recipe's
  ``min_pixels`` / ``max_pixels``; Qwen3-VL (factor 32) lands some sizes on another grid
  (:func:`collate_image_size`, :func:`fed_image`);
* a video's frames go through qwen-vl-utils' ``fetch_image`` at factor 56 (``fetch_video`` hands it
  ``image_factor`` as the patch size), are padded to an even count, then resized together at factor 28
  within 128..768 tokens of 28x28 per frame (:func:`collate_video_frames`);
* Qwen2.5-VL: the processor call's ``min_pixels`` / ``max_pixels`` reach the video processor too, so frames
  are resized per frame within the IMAGE bounds (:func:`fed_video_qwen2`);
* Qwen3-VL: the video processor samples the frames again (``do_sample_frames`` defaults to True and the
  collate gives no metadata, so it assumes 24 fps: ``max(int(n / 24 * fps), min_frames)`` frames), and its
  timestamps are those frames' indices over 24 fps (:func:`fed_video_qwen3`), and its processor keeps the
  template's ``<|vision_start|>`` / ``<|vision_end|>`` around the per-group blocks
  (:func:`expand_qwen3_videos`).

The text is the conversation with every turn's media parts first (:func:`media_first`), as Bridge's
``encode_sample`` hands it to the collate.

Inputs are plain numbers (sizes, frame counts, preset values), so the functions can sit behind any caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..geometry import (
    VIDEO_PAD,
    VIDEO_PLACEHOLDER,
    np_linspace_round,
    smart_resize,
    timestamp_text,
    video_timestamps,
)

__all__ = [
    "BRIDGE_VERSION",
    "FED_VIDEO",
    "FedGeometry",
    "FedVideo",
    "collate_image_size",
    "collate_video_frames",
    "expand_qwen3_videos",
    "fed_image",
    "fed_video_qwen2",
    "fed_video_qwen3",
    "media_first",
]

BRIDGE_VERSION = "megatron-bridge 0.6.2 (transformers 5.12.1, qwen-vl-utils 0.0.14)"

# qwen_vl_utils.vision_process constants (0.0.14)
QVU_PATCH = 14  # process_vision_info's default image_patch_size: Bridge's collate does not pass one
QVU_MERGE = 2
QVU_IMAGE_MIN_TOKENS, QVU_IMAGE_MAX_TOKENS = 4, 16384
QVU_VIDEO_MIN_TOKENS, QVU_VIDEO_MAX_TOKENS = 128, 768
QVU_FRAME_FACTOR = 2
QVU_MODEL_SEQ_LEN = 128_000  # $MODEL_SEQ_LEN default: the video total_pixels budget
# transformers' video processors: no metadata -> 24 fps (sample_frames sets it; the timestamps use it)
ASSUMED_FPS = 24.0


@dataclass(frozen=True)
class FedGeometry:
    """The model numbers the fed path needs (from the model preset and the recipe's knobs)."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int  # the recipe's (QwenVLTaskEncoder) image bounds, passed to the processor call
    max_pixels: int
    video_min_pixels: int  # the video processor's own size (shortest_edge / longest_edge)
    video_max_pixels: int
    fps: float  # the video processor's sampling fps (Qwen3)
    min_frames: int
    max_frames: int

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size


@dataclass(frozen=True)
class FedVideo:
    """One video as fed: ``tokens`` pads from a ``grid_t`` x ``height`` x ``width`` grid of ``frames``
    frames; ``indices`` / ``fps`` are what the processor's timestamps use (Qwen3)."""

    tokens: int
    grid_t: int
    height: int
    width: int
    frames: int
    indices: list[int]
    fps: float | None


def qvu_smart_resize(
    height: int, width: int, factor: int, min_pixels: float, max_pixels: float
) -> tuple[int, int]:
    """qwen-vl-utils 0.0.14 ``smart_resize`` (``max(factor, round)`` first; no clamp after the floor)."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _fetch_image_size(height: int, width: int, patch: int) -> tuple[int, int]:
    """``qwen_vl_utils.fetch_image(ele, image_patch_size=patch)`` of a ``height`` x ``width`` image given
    without size keys: factor ``patch * 2`` within 4..16384 tokens of that factor."""
    f = patch * QVU_MERGE
    return qvu_smart_resize(height, width, f, QVU_IMAGE_MIN_TOKENS * f * f, QVU_IMAGE_MAX_TOKENS * f * f)


def collate_image_size(height: int, width: int) -> tuple[int, int]:
    """The size ``process_vision_info`` hands the processor for a stored image (factor 28)."""
    return _fetch_image_size(height, width, QVU_PATCH)


def fed_image(geo: FedGeometry, height: int, width: int) -> tuple[int, int, int]:
    """(tokens, resized height, resized width) of one stored image as ``batch()`` feeds it."""
    h1, w1 = collate_image_size(height, width)
    f = geo.factor
    try:
        rh, rw = smart_resize(h1, w1, f, geo.min_pixels, geo.max_pixels)
    except ValueError as exc:  # e.g. 32x6336 (198:1) becomes 28x6328 (226:1): batch() would raise
        raise ValueError(
            f"Bridge's collate resizes the {height}x{width} image to {h1}x{w1} (qwen-vl-utils, factor 28), "
            f"which the processor refuses ({exc}): batch() would fail on this sample"
        ) from exc
    return (rh // f) * (rw // f), rh, rw


def collate_video_frames(n_frames: int, height: int, width: int) -> tuple[int, int, int]:
    """(frames, height, width) of a stored frame list after ``qwen_vl_utils.fetch_video``: each frame through
    ``fetch_image`` at factor 56, the count padded to even (the last frame repeated), then all resized at
    factor 28 within 128..768 tokens a frame and the ``total_pixels`` budget."""
    f = QVU_PATCH * QVU_MERGE
    h1, w1 = _fetch_image_size(height, width, f)  # fetch_video passes image_factor (28) as the patch size
    n2 = math.ceil(n_frames / QVU_FRAME_FACTOR) * QVU_FRAME_FACTOR
    min_px = QVU_VIDEO_MIN_TOKENS * f * f
    total = QVU_MODEL_SEQ_LEN * f * f * 0.9
    max_px = max(min(QVU_VIDEO_MAX_TOKENS * f * f, total / n2 * QVU_FRAME_FACTOR), int(min_px * 1.05))
    h2, w2 = qvu_smart_resize(h1, w1, f, min_px, max_px)
    return n2, h2, w2


def fed_video_qwen2(geo: FedGeometry, n_frames: int, height: int, width: int) -> FedVideo:
    """Qwen2/2.5-VL: ``Qwen2VLVideoProcessor`` with the call's image ``min_pixels`` / ``max_pixels``,
    every frame kept (it does not sample)."""
    n2, h2, w2 = collate_video_frames(n_frames, height, width)
    f = geo.factor
    rh, rw = smart_resize(h2, w2, f, geo.min_pixels, geo.max_pixels)
    grid_t = math.ceil(n2 / geo.temporal_patch_size)
    return FedVideo(grid_t * (rh // f) * (rw // f), grid_t, rh, rw, n2, list(range(n2)), None)


def _qwen3_video_resize(geo: FedGeometry, num_frames: int, height: int, width: int) -> tuple[int, int]:
    """transformers 5.12.1 ``video_processing_qwen3_vl.smart_resize``: a budget over T*H*W, ``t_bar`` by
    ceil (a side under the factor raises there: ValueError here)."""
    f, tf = geo.factor, geo.temporal_patch_size
    if height < f or width < f:
        raise ValueError(f"height:{height} or width:{width} must be larger than factor:{f}")
    h_bar, w_bar = round(height / f) * f, round(width / f) * f
    t_bar = math.ceil(num_frames / tf) * tf
    if t_bar * h_bar * w_bar > geo.video_max_pixels:
        beta = math.sqrt((num_frames * height * width) / geo.video_max_pixels)
        h_bar = max(f, math.floor(height / beta / f) * f)
        w_bar = max(f, math.floor(width / beta / f) * f)
    elif t_bar * h_bar * w_bar < geo.video_min_pixels:
        beta = math.sqrt(geo.video_min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / f) * f
        w_bar = math.ceil(width * beta / f) * f
    return h_bar, w_bar


def fed_video_qwen3(geo: FedGeometry, n_frames: int, height: int, width: int) -> FedVideo:
    """Qwen3-VL: ``Qwen3VLVideoProcessor.sample_frames`` over the collated frames at an assumed 24 fps, then
    its all-frame resize within its own size (the call's image bounds do not reach it)."""
    n2, h2, w2 = collate_video_frames(n_frames, height, width)
    num = int(n2 / ASSUMED_FPS * geo.fps)
    num = min(max(num, geo.min_frames), geo.max_frames, n2)
    indices = np_linspace_round(0, n2 - 1, num)
    rh, rw = _qwen3_video_resize(geo, num, h2, w2)
    f = geo.factor
    grid_t = math.ceil(num / geo.temporal_patch_size)
    return FedVideo(grid_t * (rh // f) * (rw // f), grid_t, rh, rw, num, indices, ASSUMED_FPS)


#: the fed video by the preset's ``video_sampler`` (which processor family the model's video path is)
FED_VIDEO: dict[str, Callable[[FedGeometry, int, int, int], FedVideo]] = {
    "qwen_vl_utils": fed_video_qwen2,
    "qwen3": fed_video_qwen3,
}


def media_first(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Bridge's ``normalized_vlm_sample_to_hf_example(..., media_first=True)``: in every turn whose content is
    a list, the image and video parts move before the other parts (each group keeps its order)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        msg = dict(message)
        content = msg.get("content")
        if isinstance(content, list):
            media = [p for p in content if isinstance(p, Mapping) and p.get("type") in ("image", "video")]
            msg["content"] = media + [p for p in content if not any(p is m for m in media)]
        out.append(msg)
    return out


def expand_qwen3_videos(text: str, videos: Sequence[FedVideo], temporal_patch_size: int) -> tuple[str, int]:
    """transformers 5.12.1 ``Qwen3VLProcessor.replace_video_token``: each ``<|video_pad|>`` (only the pad:
    the template's ``<|vision_start|>`` / ``<|vision_end|>`` around it stay) becomes, per temporal group,
    ``<t seconds><|vision_start|>`` pad ``<|vision_end|>`` with the sampled frames' times at 24 fps. Returns
    the text with one pad per group, and the number of those pads."""
    chunks = text.split(VIDEO_PAD)
    if len(chunks) != len(videos) + 1:
        raise ValueError(f"{len(chunks) - 1} video pads for {len(videos)} videos")
    pieces, pads = [chunks[0]], 0
    for video, chunk in zip(videos, chunks[1:], strict=True):
        stamps = video_timestamps(video.indices, video.fps or ASSUMED_FPS, temporal_patch_size)
        pieces.extend(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps)
        pieces.append(chunk)
        pads += len(stamps)
    return "".join(pieces), pads
