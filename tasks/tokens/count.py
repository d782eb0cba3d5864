"""Exact per-sample token counts for Qwen2-VL / Qwen2.5-VL / Qwen3-VL, InternVL, Nemotron VL and LLaVA-1.5 /
LLaVA-NeXT training samples, without loading a model.

Formulas: /work/shared/reference/visual-tokens.md (§1 counting rule, §2 Qwen resize / video / timestamps,
§3 tiling, §4 LLaVA anyres, §7 tokenizer). Everything here is a pure function of its arguments (tokenizer
files and chat templates are read and compiled once per process).

The counting rule (§1) for every family: render the chat template with ONE placeholder per media item, expand
each placeholder into the processor's text (wrappers, timestamps, frame labels) with ONE pad token standing
for the item's visual tokens, tokenize that text exactly, then ``text_tokens = tokens - pads``
and ``total = text_tokens + visual_tokens``. Pads are special tokens, so one pad tokenizes like N of them.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import math
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...schemas.presets import AnyresSpec, ModelPreset, TextSpec, TilingSpec
from ..errors import ConfigError

__all__ = [
    "IMAGE_PLACEHOLDER",
    "VIDEO_PLACEHOLDER",
    "AspectRatioError",
    "ExpandedText",
    "ImageTokens",
    "SampleTokens",
    "TextTokenizer",
    "VideoSpec",
    "VideoTokens",
    "VideoTooShortError",
    "count_sample_tokens",
    "expand_sample",
    "image_tokens",
    "image_tokens_batch",
    "llava_image_tokens",
    "pipeline_size",
    "render_chat",
    "render_jinja",
    "sample_video_frames",
    "select_best_resolution",
    "smart_resize",
    "tile_count",
    "tile_grid",
    "timestamp_text",
    "video_timestamps",
    "video_tokens",
]

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
IMAGE_PLACEHOLDER = f"{VISION_START}{IMAGE_PAD}{VISION_END}"
VIDEO_PLACEHOLDER = f"{VISION_START}{VIDEO_PAD}{VISION_END}"

# transformers' fallback when a video has no fps metadata (Qwen3VLProcessor / VideoProcessor warn and use 24)
_DEFAULT_VIDEO_FPS = 24.0


class AspectRatioError(ValueError):
    """Image/frame side ratio above the model's limit (200 for Qwen), or a side of size 0."""


class VideoTooShortError(ValueError):
    """Video with fewer frames than one temporal patch (2 for Qwen)."""


# --------------------------------------------------------------------------------------------------
# Resize
# --------------------------------------------------------------------------------------------------


def _check_aspect(height: int, width: int, limit: float) -> None:
    if height <= 0 or width <= 0:
        raise AspectRatioError(f"image/frame has a side of size <= 0: height={height}, width={width}")
    if max(height, width) / min(height, width) > limit:
        raise AspectRatioError(
            f"aspect ratio must be at most {limit:g}, got {max(height, width) / min(height, width):g} "
            f"(height={height}, width={width})"
        )


def smart_resize(
    height: int,
    width: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
    *,
    aspect_ratio_limit: float = 200,
) -> tuple[int, int]:
    """transformers ``qwen2_vl.image_processing_qwen2_vl.smart_resize`` (4.57.1 == 5.25.0).

    Returns (resized_height, resized_width), multiples of ``factor``. Python ``round`` (ties to even); the
    shrink branch scales from the ORIGINAL area and clamps with ``max(factor, ...)`` after the floor; the grow
    branch does not.
    """
    _check_aspect(height, width, aspect_ratio_limit)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qvu_smart_resize(
    height: int, width: int, factor: int, min_pixels: float, max_pixels: float, aspect_ratio_limit: float
) -> tuple[int, int]:
    """qwen-vl-utils 0.0.14 ``smart_resize``: ``max(factor, ...)`` on the rounding, none after the floor."""
    if max_pixels < min_pixels:
        raise ValueError(
            f"max_pixels {max_pixels} must be >= min_pixels {min_pixels} (qwen-vl-utils asserts this)"
        )
    _check_aspect(height, width, aspect_ratio_limit)
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


def _qwen3_video_resize(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
    aspect_ratio_limit: float,
) -> tuple[int, int]:
    """transformers ``qwen3_vl.video_processing_qwen3_vl.smart_resize``: budget over all frames (T*H*W)."""
    if num_frames < temporal_factor:
        raise VideoTooShortError(f"video has {num_frames} frame(s); at least {temporal_factor} are needed")
    _check_aspect(height, width, aspect_ratio_limit)
    if (
        height < factor or width < factor
    ):  # transformers 5.25 upscales tiny frames first (4.57.1 raised instead)
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


# --------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTokens:
    tokens: int
    # the size the model's vision tower sees: Qwen the smart_resize grid, tiled models the tile grid
    # (cols * tile x rows * tile, thumbnail excluded), LLaVA-NeXT the selected pinpoint
    resized_height: int
    resized_width: int
    tiles: int = 1  # tiled models: tiles incl. thumbnail; LLaVA-NeXT: views incl. the base image


def pipeline_size(
    preset: ModelPreset,
    height: int,
    width: int,
    *,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
) -> tuple[int, int]:
    """(height, width) of an image as the pipeline stores it: images over ``max_pixels`` (default: the
    preset's) are resized once to ``smart_resize(h, w, preset.factor, min_pixels, max_pixels)``; others are
    kept.

    For Qwen presets the model's own resize of the stored size is then a no-op; for tiled and LLaVA presets
    the tiles are chosen from this stored size (reference §8.2.3: downscale to <= max_pixels before tiling).
    """
    hi = preset.max_pixels if max_pixels is None else max_pixels
    lo = preset.min_pixels if min_pixels is None else min_pixels
    _check_aspect(height, width, preset.aspect_ratio_limit)
    if height * width <= hi:
        return height, width
    return smart_resize(
        height, width, preset.factor, min(lo, hi), hi, aspect_ratio_limit=preset.aspect_ratio_limit
    )


def image_tokens(
    preset: ModelPreset,
    height: int,
    width: int,
    *,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
    n_images: int = 1,
) -> ImageTokens:
    """Visual tokens of one image of ``height`` x ``width`` (as displayed) for ``preset``.

    * qwen: ``(H / factor) * (W / factor)`` after ``smart_resize``; ``max_pixels`` / ``min_pixels``
      override the preset (e.g. the Megatron-Bridge 200704 / 1003520 knobs).
    * internvl / nemotron_vl: ``tiles * tokens_per_tile`` for the tile grid of the stored size
      (:func:`pipeline_size`); ``n_images`` (the images of the sample) splits the tile budget when the
      preset's ``tiling.multi_image`` is ``split``.
    * llava: :func:`llava_image_tokens` of the stored size.

    Results are memoised per preset object and size (sizes repeat a lot in real data; ImageTokens is frozen).
    """
    entry = _IMAGE_CACHE.get(id(preset))
    if entry is None or entry[0] is not preset:
        if len(_IMAGE_CACHE) >= 8:
            _IMAGE_CACHE.clear()
        entry = (preset, {})
        _IMAGE_CACHE[id(preset)] = entry  # holds the preset, so its id cannot be reused meanwhile
    key = (height, width, max_pixels, min_pixels, n_images)
    hit = entry[1].get(key)
    if hit is None:
        hit = _image_tokens(preset, height, width, max_pixels, min_pixels, n_images)
        if len(entry[1]) >= 100_000:
            entry[1].clear()
        entry[1][key] = hit
    return hit


_IMAGE_CACHE: dict[
    int, tuple[ModelPreset, dict[tuple[int, int, int | None, int | None, int], ImageTokens]]
] = {}


def _image_tokens(
    preset: ModelPreset,
    height: int,
    width: int,
    max_pixels: int | None,
    min_pixels: int | None,
    n_images: int,
) -> ImageTokens:
    if preset.family == "qwen":
        lo = preset.min_pixels if min_pixels is None else min_pixels
        hi = preset.max_pixels if max_pixels is None else max_pixels
        if hi < lo:
            raise ValueError(f"max_pixels {hi} is below min_pixels {lo}")
        f = preset.factor
        rh, rw = smart_resize(height, width, f, lo, hi, aspect_ratio_limit=preset.aspect_ratio_limit)
        return ImageTokens(tokens=(rh // f) * (rw // f), resized_height=rh, resized_width=rw)
    h, w = pipeline_size(preset, height, width, max_pixels=max_pixels, min_pixels=min_pixels)
    if preset.tiling is not None:
        t = preset.tiling
        max_tiles = max(1, t.max_tiles // max(1, n_images)) if t.multi_image == "split" else t.max_tiles
        cols, rows = tile_grid(w, h, t, max_tiles=max_tiles)
        tiles = cols * rows + (1 if t.thumbnail and cols * rows != 1 else 0)
        return ImageTokens(
            tokens=tiles * t.tokens_per_tile,
            resized_height=rows * t.tile_size,
            resized_width=cols * t.tile_size,
            tiles=tiles,
        )
    if preset.anyres is not None:
        return llava_image_tokens(preset.anyres, h, w)
    raise ValueError(f"preset {preset.name!r} has no image token rule")  # pragma: no cover - schema forbids


# --------------------------------------------------------------------------------------------------
# Tiling (InternVL, Nemotron VL)
# --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _target_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Candidate (cols, rows) grids, ordered exactly as InternVL's ``dynamic_preprocess`` orders them: a set
    comprehension sorted by tile count (ties keep the set's iteration order, which CPython fixes for int
    tuples)."""
    grids = {
        (i, j)
        for n in range(min_tiles, max_tiles + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_tiles <= i * j <= max_tiles
    }
    return tuple(sorted(grids, key=lambda g: g[0] * g[1]))


def _closest_ratio(
    aspect: float, grids: Sequence[tuple[int, int]], width: int, height: int, size: int
) -> tuple[int, int]:
    """InternVL ``find_closest_aspect_ratio``: smallest |ratio difference|; on an exact tie the later (larger)
    grid wins when the image covers more than half of it."""
    best_diff = math.inf
    best = (1, 1)
    area = width * height
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best_diff, best = diff, (cols, rows)
        elif diff == best_diff and area > 0.5 * size * size * cols * rows:
            best = (cols, rows)
    return best


def _area_weighted_ratio(
    aspect: float, grids: Sequence[tuple[int, int]], width: int, height: int, size: int
) -> tuple[int, int]:
    """Megatron-LM ``find_closest_area_weighted_aspect_ratio`` (Llama-Nemotron-Nano-VL): maximise
    ``min(tiles * size^2 / area, 0.6) * min(r / aspect, aspect / r)``; the first maximum wins."""
    best_score = -math.inf
    best = (1, 1)
    area = width * height
    for cols, rows in grids:
        r = cols / rows
        score = min((cols * rows * size * size) / area, 0.6) * min(r / aspect, aspect / r)
        if score > best_score:
            best_score, best = score, (cols, rows)
    return best


def tile_grid(
    width: int, height: int, tiling: TilingSpec, *, max_tiles: int | None = None
) -> tuple[int, int]:
    """(cols, rows) of the tile grid an image of ``width`` x ``height`` is resized to (thumbnail not
    included).

    ``max_tiles`` overrides ``tiling.max_tiles`` (e.g. InternVL's per-image share of a multi-image sample)."""
    if width <= 0 or height <= 0:
        raise AspectRatioError(f"image has a side of size <= 0: height={height}, width={width}")
    hi = tiling.max_tiles if max_tiles is None else max_tiles
    lo = min(tiling.min_tiles, hi)
    grids = _target_grids(lo, hi)
    pick = _closest_ratio if tiling.ratio == "closest" else _area_weighted_ratio
    return pick(width / height, grids, width, height, tiling.tile_size)


def tile_count(width: int, height: int, tiling: TilingSpec, *, max_tiles: int | None = None) -> int:
    """Tiles of one image including the thumbnail (added when the grid has more than one tile)."""
    cols, rows = tile_grid(width, height, tiling, max_tiles=max_tiles)
    return cols * rows + (1 if tiling.thumbnail and cols * rows != 1 else 0)


# --------------------------------------------------------------------------------------------------
# LLaVA-1.5 / LLaVA-NeXT
# --------------------------------------------------------------------------------------------------


def select_best_resolution(height: int, width: int, pinpoints: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """transformers ``image_processing_utils.select_best_resolution``: the (height, width) pinpoint keeping
    the most effective resolution after a fit-inside downscale; on equal effective resolution the least
    waste; the first listed wins exact ties."""
    best = (0, 0)
    max_eff, min_waste = 0, math.inf
    for ph, pw in pinpoints:
        scale = min(pw / width, ph / height)
        dw, dh = int(width * scale), int(height * scale)
        eff = min(dw * dh, width * height)
        waste = pw * ph - eff
        if eff > max_eff or (eff == max_eff and waste < min_waste):
            max_eff, min_waste, best = eff, waste, (ph, pw)
    return best


def llava_image_tokens(anyres: AnyresSpec, height: int, width: int) -> ImageTokens:
    """``<image>`` tokens of one image: LLaVA-1.5 ``(size / patch)^2 + additional - 1`` (576); LLaVA-NeXT
    ``LlavaNextProcessor._get_number_of_features`` (unpadded anyres grid + one newline per row + base
    image)."""
    if height <= 0 or width <= 0:
        raise AspectRatioError(f"image has a side of size <= 0: height={height}, width={width}")
    size = anyres.image_size
    p = size // anyres.vision_patch_size
    base = p * p + anyres.num_additional_image_tokens
    drop = 1 if anyres.feature_select == "default" else 0
    if not anyres.grid_pinpoints:
        return ImageTokens(tokens=base - drop, resized_height=size, resized_width=size)
    bh, bw = select_best_resolution(height, width, anyres.grid_pinpoints)
    cur_h, cur_w = p * (bh // size), p * (bw // size)
    if width / height > cur_w / cur_h:
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= ((cur_h - new_h) // 2) * 2
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= ((cur_w - new_w) // 2) * 2
    tokens = cur_h * cur_w + cur_h + base - drop
    return ImageTokens(
        tokens=tokens, resized_height=bh, resized_width=bw, tiles=(bh // size) * (bw // size) + 1
    )


# --------------------------------------------------------------------------------------------------
# Many images at once (sizes known from a manifest)
# --------------------------------------------------------------------------------------------------


def image_tokens_batch(
    preset: ModelPreset,
    heights: Sequence[int] | np.ndarray,
    widths: Sequence[int] | np.ndarray,
    *,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
) -> np.ndarray:
    """:func:`image_tokens` for many single images at once (int64 array, -1 where the size is invalid).

    Qwen: ``smart_resize`` vectorised with numpy; float64 division, ``np.round`` (ties to even, like Python's
    ``round``), ``np.sqrt``, floor and ceil are the same IEEE operations as the scalar code, so the results
    are identical. Other families: the scalar rule once per distinct size.
    """
    h = np.asarray(heights, dtype=np.int64)
    w = np.asarray(widths, dtype=np.int64)
    if h.shape != w.shape:
        raise ValueError(f"{h.size} heights but {w.size} widths")
    out = np.full(h.shape, -1, dtype=np.int64)
    if h.size == 0:
        return out
    valid = (h > 0) & (w > 0)
    hv, wv = np.where(valid, h, 1), np.where(valid, w, 1)
    ratio = np.maximum(hv, wv) / np.minimum(hv, wv)
    valid &= ratio <= preset.aspect_ratio_limit
    if preset.family != "qwen":
        pairs, inverse = np.unique(np.stack([hv, wv], axis=1)[valid], axis=0, return_inverse=True)
        per = np.array(
            [
                image_tokens(preset, int(a), int(b), max_pixels=max_pixels, min_pixels=min_pixels).tokens
                for a, b in pairs
            ],
            dtype=np.int64,
        )
        out[valid] = per[inverse.reshape(-1)]
        return out
    lo = preset.min_pixels if min_pixels is None else min_pixels
    hi = preset.max_pixels if max_pixels is None else max_pixels
    if hi < lo:
        raise ValueError(f"max_pixels {hi} is below min_pixels {lo}")
    f = preset.factor
    hf, wf = hv.astype(np.float64), wv.astype(np.float64)
    h_bar = np.round(hf / f).astype(np.int64) * f
    w_bar = np.round(wf / f).astype(np.int64) * f
    area = h_bar * w_bar
    shrink = area > hi
    grow = ~shrink & (area < lo)
    beta = np.sqrt((hf * wf) / hi)
    h_s = np.maximum(f, np.floor(hf / beta / f).astype(np.int64) * f)
    w_s = np.maximum(f, np.floor(wf / beta / f).astype(np.int64) * f)
    beta_g = np.sqrt(lo / (hf * wf))
    h_g = np.ceil(hf * beta_g / f).astype(np.int64) * f
    w_g = np.ceil(wf * beta_g / f).astype(np.int64) * f
    h_bar = np.where(shrink, h_s, np.where(grow, h_g, h_bar))
    w_bar = np.where(shrink, w_s, np.where(grow, w_g, w_bar))
    out[valid] = ((h_bar // f) * (w_bar // f))[valid]
    return out


# --------------------------------------------------------------------------------------------------
# Video frame sampling
# --------------------------------------------------------------------------------------------------


def _np_linspace_round(start: float, stop: float, num: int) -> list[int]:
    """``np.linspace(start, stop, num).round().astype(int)``: float64 ``i * step + start``, last = stop,
    ties to even."""
    if num <= 0:
        return []
    if num == 1:
        return [round(start)]
    step = (stop - start) / (num - 1)
    values = [i * step + start for i in range(num - 1)] + [stop]
    return [round(v) for v in values]


def _torch_linspace_round(start: float, end: float, steps: int) -> list[int]:
    """``torch.linspace(start, end, steps).round().long()`` per the CPU scalar kernel (first half counted
    from ``start``, second half from ``end``), evaluated in float64 (torch: float32). For an even ``steps``
    the exact values are never ties; float32 vs float64 can only differ for clips of tens of thousands of
    frames (and then only the indices, never the token count)."""
    if steps <= 0:
        return []
    if steps == 1:
        return [round(start)]
    step = (end - start) / (steps - 1)
    halfway = steps // 2
    values = [start + step * i if i < halfway else end - step * (steps - i - 1) for i in range(steps)]
    return [round(v) for v in values]


def _qvu_nframes(preset: ModelPreset, total_frames: int, video_fps: float) -> int:
    """qwen-vl-utils 0.0.14 ``smart_nframes`` (fps mode; FRAME_FACTOR = temporal_patch_size = 2)."""
    ff = preset.temporal_patch_size
    min_frames = math.ceil(preset.min_frames / ff) * ff
    max_frames = math.floor(min(preset.max_frames, total_frames) / ff) * ff
    nframes = total_frames / video_fps * preset.fps
    nframes = min(min(max(nframes, min_frames), max_frames), total_frames)
    n = math.floor(nframes / ff) * ff
    if not ff <= n <= total_frames:
        raise VideoTooShortError(f"nframes should be in [{ff}, {total_frames}], got {n}")
    return n


def _qwen3_nframes(preset: ModelPreset, total_frames: int, video_fps: float) -> int:
    """transformers ``Qwen3VLVideoProcessor.sample_frames`` (fps mode)."""
    n = int(total_frames / video_fps * preset.fps)
    return min(max(n, preset.min_frames), preset.max_frames, total_frames)


def sample_video_frames(
    preset: ModelPreset,
    n_frames: int,
    video_fps: float,
    *,
    max_num_frames: int | None = None,
    mode: Literal["uniform", "truncate"] = "uniform",
) -> list[int]:
    """Indices of the frames the model's sampler takes from an ``n_frames`` video at ``video_fps``.

    qwen2/2.5 (``video_sampler="qwen_vl_utils"``): qwen-vl-utils 0.0.14, ``torch.linspace(0, T-1, n).round()``
    with an even ``n``. qwen3: transformers ``np.linspace(0, T-1, n).round()`` (``n`` may be odd; the
    processor pads). uniform (tiled models): ``np.linspace(0, T-1, min(max_frames, T)).round()``; none:
    raises. Then the ``max_num_frames`` knob, if the sampler returned more: ``"uniform"`` keeps an
    evenly spread subset (count rounded down to a multiple of the temporal patch size), ``"truncate"`` keeps
    the first ``max_num_frames`` (Megatron-Bridge ``QwenVLTaskEncoder``: ``v[:max_num_frames]``).
    """
    if preset.video_sampler == "none":
        raise ValueError(f"model preset {preset.name!r} takes no video input")
    tps = preset.temporal_patch_size
    if n_frames < tps:
        raise VideoTooShortError(f"video has {n_frames} frame(s); at least {tps} are needed")
    if not video_fps > 0:
        raise ValueError(f"video_fps must be > 0, got {video_fps}")
    if preset.video_sampler == "qwen_vl_utils":
        n = _qvu_nframes(preset, n_frames, video_fps)
        indices = _torch_linspace_round(0, n_frames - 1, n)
    elif preset.video_sampler == "qwen3":
        n = _qwen3_nframes(preset, n_frames, video_fps)
        indices = _np_linspace_round(0, n_frames - 1, n)
    else:  # uniform: Megatron-LM linspace(0, F - 1, min(num_frames, F)); InternVL budget at max_num_frame
        indices = _np_linspace_round(0, n_frames - 1, min(preset.max_frames, n_frames))

    if max_num_frames is None or len(indices) <= max_num_frames:
        return indices
    if mode == "truncate":
        if max_num_frames < 1:
            raise ValueError(f"max_num_frames must be >= 1, got {max_num_frames}")
        return indices[:max_num_frames]
    if mode == "uniform":
        keep = (max_num_frames // tps) * tps
        if keep < tps:
            raise ValueError(f"max_num_frames must be >= {tps} in uniform mode, got {max_num_frames}")
        return [indices[p] for p in _np_linspace_round(0, len(indices) - 1, keep)]
    raise ValueError(f"unknown max_num_frames mode {mode!r}; expected 'uniform' or 'truncate'")


# --------------------------------------------------------------------------------------------------
# Video tokens
# --------------------------------------------------------------------------------------------------


def video_timestamps(indices: Sequence[int], video_fps: float, temporal_patch_size: int = 2) -> list[float]:
    """``Qwen3VLProcessor._calculate_timestamps``: pad indices to a multiple of the temporal patch (repeat the
    last), seconds = index / fps, average the first and last frame of every temporal group."""
    idx = list(indices)
    if not idx:
        return []
    if len(idx) % temporal_patch_size:
        idx.extend([idx[-1]] * (temporal_patch_size - len(idx) % temporal_patch_size))
    secs = [i / video_fps for i in idx]
    return [
        (secs[i] + secs[i + temporal_patch_size - 1]) / 2 for i in range(0, len(secs), temporal_patch_size)
    ]


def timestamp_text(seconds: float) -> str:
    """Qwen3-VL per-group timestamp text, e.g. ``<12.3 seconds>``."""
    return f"<{seconds:.1f} seconds>"


def _timestamp_tokens(seconds: float) -> int:
    # Qwen vocab: "<", one token per digit and for ".", " seconds", ">" (reference §2.5)
    return 3 + len(f"{seconds:.1f}")


@dataclass(frozen=True)
class VideoTokens:
    """One video's tokens. For Qwen3 the expanded block is ``3 + extra_text_tokens + tokens`` long (it
    replaces the 3-token template placeholder). Caution: the §1 rule subtracts only the pad (1 per item), so
    relative to ``tokens(template) - n_placeholders`` a video adds ``extra_text_tokens + 1`` text tokens,
    assuming the first ``<`` does not merge with preceding text (``count_sample_tokens`` tokenizes in place
    and is always exact)."""

    tokens: int  # visual pad tokens
    # Qwen3: sum over groups of (timestamp + 2 wrappers), minus the 3 placeholder tokens; else 0
    extra_text_tokens: int
    grid_t: int
    resized_height: int
    resized_width: int


def _qwen_video_bounds(preset: ModelPreset) -> tuple[int, int]:
    if (
        preset.video_min_pixels is None or preset.video_max_pixels is None
    ):  # the schema requires them for qwen
        raise ValueError(f"preset {preset.name!r} sets no video_min_pixels / video_max_pixels")
    return preset.video_min_pixels, preset.video_max_pixels


def _video_layout(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    max_pixels: int | None,
) -> tuple[int, int, int, int]:
    """(grid_t, per-group pad tokens, resized_height, resized_width).

    Tiled presets: one tile per frame (InternVL, Nemotron VL), so grid_t = frames and a group = one tile."""
    f = preset.factor
    tps = preset.temporal_patch_size
    limit = preset.aspect_ratio_limit
    if n_sampled < 1:
        raise VideoTooShortError(f"video has {n_sampled} sampled frame(s)")
    if preset.family != "qwen":
        if preset.tiling is None or preset.video_sampler == "none":
            raise ValueError(f"model preset {preset.name!r} takes no video input")
        _check_aspect(height, width, limit)
        size = preset.tiling.tile_size
        return n_sampled, preset.tiling.tokens_per_tile, size, size
    vmin, vmax = _qwen_video_bounds(preset)
    if preset.video_sampler == "qwen_vl_utils":
        # qwen-vl-utils fetch_video: per-frame budget from the token limits and the total budget over n frames
        n_even = math.ceil(n_sampled / tps) * tps
        min_px: float = vmin
        cap: float = vmax
        if preset.video_total_pixels is not None:
            cap = min(cap, preset.video_total_pixels / n_even * tps)
        max_px = max(cap, int(min_px * 1.05))
        if max_pixels is not None:
            max_px = min(max_pixels, max_px)
        rh, rw = _qvu_smart_resize(height, width, f, min_px, max_px, limit)
    else:
        if max_pixels is not None:
            # --max-pixels caps each stored frame; the model's all-frame budget then applies to those frames
            lo = min(vmin, max_pixels)
            height, width = smart_resize(height, width, f, lo, max_pixels, aspect_ratio_limit=limit)
        rh, rw = _qwen3_video_resize(n_sampled, height, width, tps, f, vmin, vmax, limit)
    grid_t = math.ceil(n_sampled / tps)
    return grid_t, (rh // f) * (rw // f), rh, rw


def video_tokens(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    *,
    indices: Sequence[int] | None = None,
    video_fps: float | None = None,
    max_pixels: int | None = None,
) -> VideoTokens:
    """Tokens of one video of ``n_sampled`` frames (after sampling) of size ``height`` x ``width``.

    Qwen: ``tokens = ceil(n / temporal_patch) * (H / factor) * (W / factor)``; tiled presets:
    ``n * tokens_per_tile`` (one tile a frame; their frame labels are text, counted by
    :func:`count_sample_tokens`, so ``extra_text_tokens`` is 0 here); LLaVA presets take no video
    (ValueError). For timestamp presets (Qwen3) ``indices`` (the sampled frame indices) are required and
    ``video_fps`` defaults to 24 as in transformers;
    ``extra_text_tokens = sum_groups(tokens("<t seconds>") + 2 wrappers) - 3`` with the Qwen vocab count
    ``tokens("<t seconds>") = 5 + integer digits`` (see ``VideoTokens`` for how it relates to the §1 rule).
    """
    grid_t, per_group, rh, rw = _video_layout(preset, n_sampled, height, width, max_pixels)
    extra = 0
    if preset.timestamps:
        stamps = _group_timestamps(preset, n_sampled, grid_t, indices, video_fps)
        extra = sum(_timestamp_tokens(t) + 2 for t in stamps) - 3
    return VideoTokens(
        tokens=grid_t * per_group, extra_text_tokens=extra, grid_t=grid_t, resized_height=rh, resized_width=rw
    )


def _group_timestamps(
    preset: ModelPreset, n_sampled: int, grid_t: int, indices: Sequence[int] | None, video_fps: float | None
) -> list[float]:
    if indices is None:
        raise ValueError(
            f"preset {preset.name!r} writes per-group timestamps: pass the sampled frame indices"
        )
    if len(indices) != n_sampled:
        raise ValueError(f"got {len(indices)} frame indices for {n_sampled} sampled frames")
    fps = _DEFAULT_VIDEO_FPS if video_fps is None else video_fps
    if not fps > 0:
        raise ValueError(f"video_fps must be > 0, got {fps}")
    stamps = video_timestamps(indices, fps, preset.temporal_patch_size)
    assert len(stamps) == grid_t
    return stamps


# --------------------------------------------------------------------------------------------------
# Text tokenizer
# --------------------------------------------------------------------------------------------------

_QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPECIALS = [  # ids from 151643 upward, in this order (reference §7)
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",  # Qwen3: 151665-151668
]  # fmt: skip
_QWEN2_FIRST_SPECIAL = 151643


@functools.lru_cache(maxsize=1)
def _qwen2_ranks() -> dict[bytes, int]:
    spec = importlib.util.find_spec("dashscope")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the dashscope package (which ships qwen.tiktoken) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    ranks: dict[bytes, int] = {}
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != _QWEN2_FIRST_SPECIAL:
        raise RuntimeError(f"{path} holds {len(ranks)} ranks, expected {_QWEN2_FIRST_SPECIAL}")
    return ranks


@functools.lru_cache(maxsize=4)
def _qwen2_encoding(specials: tuple[str, ...] = tuple(_QWEN2_SPECIALS)) -> Any:
    """tiktoken encoder over qwen.tiktoken; ``specials`` get ids from 151643 upward in order (the ids never
    change a count, only which strings are single tokens)."""
    import tiktoken

    table = {tok: _QWEN2_FIRST_SPECIAL + i for i, tok in enumerate(specials)}
    return tiktoken.Encoding(
        "qwen2", pat_str=_QWEN2_PAT, mergeable_ranks=_qwen2_ranks(), special_tokens=table
    )


@functools.lru_cache(maxsize=8)
def _hf_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


class TextTokenizer:
    """Exact text tokenizer; special/added tokens in the text count as one token each."""

    def __init__(self, encode: Callable[[str], list[int]], name: str) -> None:
        self._encode = encode
        self.name = name

    def __repr__(self) -> str:
        return f"TextTokenizer({self.name!r})"

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def count(self, text: str) -> int:
        return len(self._encode(text))

    @classmethod
    def builtin_qwen2(cls, special_tokens: Sequence[str] | None = None) -> TextTokenizer:
        """Qwen2/2.5/3 vocabulary from dashscope's ``qwen.tiktoken`` + the Qwen2-VL/Qwen3 special tokens
        (or ``special_tokens``, e.g. Qwen2.5's plus InternVL's added ``<img>``, ``</img>``,
        ``<IMG_CONTEXT>``).

        Where it comes from: ``qwen.tiktoken`` holds the 151,643 byte-level BPE ranks of
        Qwen/Qwen2/Qwen2.5/Qwen3 (the same merges as the hub ``tokenizer.json``); it ships inside Alibaba's
        official ``dashscope`` wheel (Apache-2.0) and is read as a file, the SDK is never imported. The
        split regex and the NFC normalizer are those of the hub ``tokenizer.json``; special tokens split the
        text first, as ``tokenizers`` does for added tokens. Checked ids: reference sheet §7."""
        specials = tuple(_QWEN2_SPECIALS) if special_tokens is None else tuple(special_tokens)
        enc = _qwen2_encoding(specials)
        name = "qwen2" if special_tokens is None else f"qwen2+{len(specials)}"

        def encode(text: str) -> list[int]:
            ids: list[int] = enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")
            return ids

        return cls(encode, name)

    @classmethod
    def from_path(cls, path: str | Path) -> TextTokenizer:
        """A Hugging Face ``tokenizer.json`` (or a folder holding one), via the ``tokenizers`` package."""
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        tok = _hf_tokenizer(str(p.resolve()))

        def encode(text: str) -> list[int]:
            return list(tok.encode(text, add_special_tokens=False).ids)

        return cls(encode, str(p))

    @classmethod
    def for_preset(cls, preset: ModelPreset, path: str | Path | None = None) -> TextTokenizer:
        """The tokenizer for ``preset``: ``path`` (a tokenizer.json or a model folder) when given, else
        ``preset.tokenizer`` ("qwen2" = built-in, with ``preset.special_tokens``; a path = that file).

        Raises ConfigError for a preset that ships no vocabulary (LLaVA, Nemotron VL) and no ``path``."""
        if path is not None:
            return cls.from_path(path)
        if preset.tokenizer is None:
            raise ConfigError(
                f"model preset {preset.name!r} ships no tokenizer (its vocabulary cannot be bundled "
                "offline): pass --tokenizer with the model's tokenizer.json or a local model folder"
            )
        if preset.tokenizer == "qwen2":
            return cls.builtin_qwen2(preset.special_tokens)
        return cls.from_path(preset.tokenizer)


# --------------------------------------------------------------------------------------------------
# Chat template + sample count
# --------------------------------------------------------------------------------------------------


def _placeholders(preset: ModelPreset) -> tuple[str, str]:
    """(image, video) placeholder strings the chat template writes for one media part."""
    if preset.family == "qwen" or preset.text is None:
        return IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER
    return preset.text.image_placeholder, preset.text.video_placeholder


def render_chat(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    """Render the model's chat template (training form, no generation prompt), one placeholder per media item.

    ``preset.chat_template`` (Jinja, e.g. from a model folder) when set; otherwise the built-in ChatML
    renderer (Qwen, InternVL): ``preset.default_system`` first when the first message is not a system
    message, then
    ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message with each image / video part written as the
    family's placeholder (+ ``text.image_suffix`` / ``text.video_suffix``).

    Returns (text, n_image_placeholders, n_video_placeholders).
    """
    if preset.chat_template is not None:
        return _render_template(messages, preset)
    img_ph, vid_ph = _placeholders(preset)
    if preset.text is not None:
        img_ph += preset.text.image_suffix
        vid_ph += preset.text.video_suffix
    out: list[str] = []
    n_img = n_vid = 0
    if messages and messages[0].get("role") != "system" and preset.default_system is not None:
        out.append(f"<|im_start|>system\n{preset.default_system}<|im_end|>\n")
    for message in messages:
        out.append(f"<|im_start|>{message['role']}\n")
        content = message.get("content")
        if content is None:
            content = ""
        if isinstance(content, str):
            out.append(content)
        else:
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    out.append(part.get("text") or "")
                elif kind == "image":
                    out.append(img_ph)
                    n_img += 1
                elif kind == "video":
                    out.append(vid_ph)
                    n_vid += 1
                else:
                    raise ValueError(f"unknown content part type {kind!r}")
        out.append("<|im_end|>\n")
    return "".join(out), n_img, n_vid


def _render_template(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    assert preset.chat_template is not None
    n_img = n_vid = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type")
                if kind == "image":
                    n_img += 1
                elif kind == "video":
                    n_vid += 1
                elif kind != "text":
                    raise ValueError(f"unknown content part type {kind!r}")
    specials = {"bos_token": preset.text.bos_token} if preset.text is not None else {}
    text = render_jinja(preset.chat_template, messages, **specials)
    img_ph, vid_ph = _placeholders(preset)
    if preset.family == "qwen":  # count the pads: add_vision_id templates prefix "Picture k: " to them
        got_img, got_vid = text.count(IMAGE_PAD), text.count(VIDEO_PAD)
    else:
        got_img, got_vid = _count_placeholders(text, img_ph, vid_ph)
    if (got_img, got_vid) != (n_img, n_vid):
        raise ValueError(
            f"the chat template wrote {got_img} image / {got_vid} video placeholder(s) for "
            f"{n_img} image / {n_vid} video part(s)"
        )
    return text, n_img, n_vid


@functools.lru_cache(maxsize=16)
def _placeholder_re(*placeholders: str) -> re.Pattern[str]:
    alts = sorted({p for p in placeholders if p}, key=len, reverse=True)
    return re.compile("|".join(re.escape(p) for p in alts))


def _count_placeholders(text: str, img_ph: str, vid_ph: str) -> tuple[int, int]:
    found = _placeholder_re(img_ph, vid_ph).findall(text)
    return sum(1 for f in found if f == img_ph), sum(1 for f in found if f == vid_ph)


@functools.lru_cache(maxsize=16)
def _compile_template(source: str) -> Any:
    """Compile a chat template the way transformers' ``_compile_jinja_template`` does: sandboxed,
    ``trim_blocks`` + ``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag, ``tojson``,
    ``raise_exception`` and ``strftime_now``."""
    import json
    from datetime import datetime

    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(Extension):  # transformers' AssistantTracker, without the index bookkeeping
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_support"), [], [], body).set_lineno(lineno)

        def _support(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render_jinja(source: str, messages: Sequence[Mapping[str, Any]], **special_tokens: str) -> str:
    """Render a Hugging Face chat template (training form: ``add_generation_prompt=False``).

    A template error (``raise_exception``, a bad role order...) becomes a ValueError naming it."""
    from jinja2.exceptions import TemplateError

    try:
        text: str = _compile_template(source).render(
            messages=list(messages), add_generation_prompt=False, tools=None, documents=None, **special_tokens
        )
    except TemplateError as exc:
        raise ValueError(f"chat template error: {exc}") from exc
    return text


@dataclass(frozen=True)
class VideoSpec:
    n_sampled_frames: int
    height: int
    width: int
    indices: Sequence[int] | None = None
    video_fps: float | None = None


@dataclass(frozen=True)
class SampleTokens:
    text_tokens: int  # everything that is not a visual pad (template, text, wrappers, timestamps)
    visual_tokens: int
    total_tokens: int
    per_image: list[int]
    per_video: list[int]


_QWEN_PAD_RE = re.compile(r"<\|(image|video)_pad\|>")


@dataclass(frozen=True)
class ExpandedText:
    """A sample's token sequence as text, each visual span written with ONE pad token.

    ``tokens(text) - pads + visual`` is the exact sequence length. ``span_ends[k]`` is the character offset in
    ``text`` right after visual span ``k`` (its end wrapper: always a special token, so a token boundary) and
    ``span_tokens[k]`` the visual tokens it stands for (Qwen3 and tiled videos have one span per
    temporal group or frame)."""

    text: str
    pads: int
    per_image: list[int]
    per_video: list[int]
    span_ends: list[int] = field(default_factory=list)
    span_tokens: list[int] = field(default_factory=list)

    @property
    def visual_tokens(self) -> int:
        return sum(self.per_image) + sum(self.per_video)


def expand_sample(
    messages: Sequence[Mapping[str, Any]],
    preset: ModelPreset,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    *,
    max_pixels: int | None = None,
    spans: bool = True,
) -> ExpandedText:
    """Render ``messages`` and expand every media placeholder the way the model's processor does, with one pad
    per visual span. ``image_sizes`` are (height, width) per image part in order, ``videos`` one spec per
    video part in order. ``spans=False`` skips the span offsets (counting needs only ``text`` and
    ``pads``). Raises ValueError for a count mismatch or media the model cannot take."""
    text, n_img, n_vid = render_chat(messages, preset)
    if n_img != len(image_sizes):
        raise ValueError(f"sample has {n_img} image part(s) but {len(image_sizes)} image size(s)")
    if n_vid != len(videos):
        raise ValueError(f"sample has {n_vid} video part(s) but {len(videos)} video spec(s)")
    if preset.family == "qwen":
        return _expand_qwen(text, preset, image_sizes, videos, max_pixels, spans)
    return _expand_generic(text, preset, image_sizes, videos, max_pixels)


def _expand_qwen(
    text: str,
    preset: ModelPreset,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    max_pixels: int | None,
    spans: bool = True,
) -> ExpandedText:
    n_img, n_vid = len(image_sizes), len(videos)
    if text.count(IMAGE_PAD) != n_img or text.count(VIDEO_PAD) != n_vid:
        raise ValueError("message text contains literal <|image_pad|> / <|video_pad|> tokens")
    per_image = [image_tokens(preset, h, w, max_pixels=max_pixels).tokens for h, w in image_sizes]
    per_video: list[int] = []
    group_tokens: list[list[int]] = []  # visual tokens of each span of each video
    if not preset.timestamps:
        for v in videos:
            t = video_tokens(preset, v.n_sampled_frames, v.height, v.width, max_pixels=max_pixels).tokens
            per_video.append(t)
            group_tokens.append([t])
        expanded = text
    else:
        # Qwen3VLProcessor: each video placeholder becomes, per temporal group, "<t seconds>" start pads end
        chunks = text.split(VIDEO_PLACEHOLDER)
        if len(chunks) != n_vid + 1:
            raise ValueError("a video pad is not wrapped as <|vision_start|><|video_pad|><|vision_end|>")
        pieces = [chunks[0]]
        for v, chunk in zip(videos, chunks[1:], strict=True):
            grid_t, per_group, _, _ = _video_layout(preset, v.n_sampled_frames, v.height, v.width, max_pixels)
            stamps = _group_timestamps(preset, v.n_sampled_frames, grid_t, v.indices, v.video_fps)
            pieces.extend(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps)
            pieces.append(chunk)
            per_video.append(grid_t * per_group)
            group_tokens.append([per_group] * grid_t)
        expanded = "".join(pieces)
    pads = n_img + sum(len(g) for g in group_tokens)
    if not spans:
        return ExpandedText(expanded, pads, per_image, per_video)
    # visual spans in text order: pads end one wrapper (<|vision_end|>) after the pad
    ends, toks = [], []
    images, vids = iter(per_image), iter(group_tokens)
    groups: list[int] = []
    for m in _QWEN_PAD_RE.finditer(expanded):
        end = m.end()
        if expanded.startswith(VISION_END, end):
            end += len(VISION_END)
        if m.group(1) == "image":
            toks.append(next(images))
        else:
            if not groups:
                groups = list(next(vids))
            toks.append(groups.pop(0))
        ends.append(end)
    return ExpandedText(expanded, pads, per_image, per_video, ends, toks)


def _expand_generic(
    text: str,
    preset: ModelPreset,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    max_pixels: int | None,
) -> ExpandedText:
    spec = preset.text
    assert spec is not None  # the schema requires it outside the qwen family
    img_ph, vid_ph = _placeholders(preset)
    if _count_placeholders(text, img_ph, vid_ph) != (len(image_sizes), len(videos)):
        raise ValueError(f"message text contains a literal {img_ph} / {vid_ph} placeholder")
    n_images = len(image_sizes)
    per_image = [
        image_tokens(preset, h, w, max_pixels=max_pixels, n_images=n_images).tokens for h, w in image_sizes
    ]
    block = spec.image_start + spec.image_pad + spec.image_end
    out: list[str] = []
    ends: list[int] = []
    toks: list[int] = []
    per_video: list[int] = []
    pos = 0
    length = 0
    images, vids = iter(per_image), iter(videos)
    if spec.add_bos and not text.startswith(spec.bos_token):
        out.append(spec.bos_token)
        length = len(spec.bos_token)
    for m in _placeholder_re(img_ph, vid_ph).finditer(text):
        head = text[pos : m.start()]
        out.append(head)
        length += len(head)
        pos = m.end()
        if m.group(0) == img_ph:
            out.append(block)
            length += len(block)
            ends.append(length)
            toks.append(next(images))
            continue
        v = next(vids)
        frames, per_frame, _, _ = _video_layout(preset, v.n_sampled_frames, v.height, v.width, max_pixels)
        labels = _frame_labels(spec, v)
        for k in range(frames):
            if k:
                out.append(spec.video_frame_sep)
                length += len(spec.video_frame_sep)
            piece = labels[k] + block
            out.append(piece)
            length += len(piece)
            ends.append(length)
            toks.append(per_frame)
        per_video.append(frames * per_frame)
    out.append(text[pos:])
    return ExpandedText("".join(out), len(ends), per_image, per_video, ends, toks)


def _frame_labels(spec: TextSpec, v: VideoSpec) -> list[str]:
    if not spec.video_frame:
        return [""] * v.n_sampled_frames
    if "{t" in spec.video_frame and v.indices is None:
        raise ValueError("this model labels video frames with their time: pass the sampled frame indices")
    fps = _DEFAULT_VIDEO_FPS if v.video_fps is None else v.video_fps
    idx = list(v.indices) if v.indices is not None else list(range(v.n_sampled_frames))
    if len(idx) != v.n_sampled_frames:
        raise ValueError(f"got {len(idx)} frame indices for {v.n_sampled_frames} sampled frames")
    return [spec.video_frame.format(i=k + 1, t=i / fps) for k, i in enumerate(idx)]


def _check_pad(tokenizer: TextTokenizer, preset: ModelPreset) -> None:
    """The pad must be ONE token of ``tokenizer`` for the §1 rule to hold (checked once per pair)."""
    if preset.text is None:
        return
    key = (id(tokenizer), preset.text.image_pad)
    if key in _PAD_OK:
        return
    n = tokenizer.count(preset.text.image_pad)
    if n != 1:
        raise ConfigError(
            f"tokenizer {tokenizer.name} splits the image token {preset.text.image_pad!r} into {n} tokens: "
            f"pass the tokenizer of the {preset.name} model (--tokenizer), whose added tokens include it"
        )
    _PAD_OK.add(key)


_PAD_OK: set[tuple[int, str]] = set()


def count_sample_tokens(
    messages: Sequence[Mapping[str, Any]],
    preset: ModelPreset,
    tokenizer: TextTokenizer,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    *,
    max_pixels: int | None = None,
) -> SampleTokens:
    """Exact sequence length of one sample (reference §1):
    ``tokens(template) - n_placeholders + sum(pads) + extra text``.

    ``image_sizes`` are (height, width) per image part in order, ``videos`` one spec per video part in order.
    For timestamp presets every video placeholder is expanded as Qwen3VLProcessor does (per group
    ``<t seconds><|vision_start|>`` pads ``<|vision_end|>``, here with one pad per group) and the result is
    tokenized, so the count stays exact when the text before a video merges with ``<`` (``":<"``, ``" <"``).
    Tiled and LLaVA presets are expanded the same way (``<img>`` pad ``</img>``, frame labels, BOS).
    """
    _check_pad(tokenizer, preset)
    exp = expand_sample(messages, preset, image_sizes, videos, max_pixels=max_pixels, spans=False)
    text_tokens = tokenizer.count(exp.text) - exp.pads
    visual = exp.visual_tokens
    return SampleTokens(
        text_tokens=text_tokens,
        visual_tokens=visual,
        total_tokens=text_tokens + visual,
        per_image=exp.per_image,
        per_video=exp.per_video,
    )
