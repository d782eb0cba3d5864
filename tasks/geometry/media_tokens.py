"""Visual tokens of one media item and the frames a video gives the model: the target model's geometry,
asked of its family (:mod:`.families`) without ever naming one. Per-sample counts (text included) are the
tokens stage's (:mod:`vlmforge.tasks.tokens.count`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...schemas.presets import ModelPreset
from .families import family_of
from .families.model_family import ImageTokens, VideoTokens
from .frame_sampling import FramesMode, VideoTooShortError, thin_frames

__all__ = ["image_tokens", "image_tokens_batch", "sample_video_frames", "video_tokens"]


def image_tokens(
    preset: ModelPreset,
    height: int,
    width: int,
    *,
    min_pixels: int,
    max_pixels: int,
    n_images: int = 1,
) -> ImageTokens:
    """Visual tokens of one image of ``height`` x ``width`` (as displayed) for ``preset`` within the image
    bounds ``min_pixels`` / ``max_pixels`` (the run's, resolved: :class:`~.pixel_bounds.PixelBounds`).

    * qwen: ``(H / factor) * (W / factor)`` after ``smart_resize`` within the bounds (e.g. the
      Megatron-Bridge 200704 / 1003520 knobs).
    * internvl / nemotron_vl: ``tiles * tokens_per_tile`` for the tile grid of the stored size
      (:func:`~.resize.pipeline_size`); ``n_images`` (the images of the sample) splits the tile budget when
      the preset's ``tiling.multi_image`` is ``split``.
    * llava: :func:`~.families.llava.llava_image_tokens` of the stored size.

    Results are memoised per preset object and size.
    """
    return family_of(preset).image_tokens(
        preset, height, width, min_pixels=min_pixels, max_pixels=max_pixels, n_images=n_images
    )


def image_tokens_batch(
    preset: ModelPreset,
    heights: Sequence[int] | np.ndarray,
    widths: Sequence[int] | np.ndarray,
    *,
    min_pixels: int,
    max_pixels: int,
) -> np.ndarray:
    """:func:`image_tokens` for many single images at once (int64 array, -1 where the size is invalid: a
    side <= 0 or a side ratio over the preset's limit)."""
    h = np.asarray(heights, dtype=np.int64)
    w = np.asarray(widths, dtype=np.int64)
    if h.shape != w.shape:
        raise ValueError(f"{h.size} heights but {w.size} widths")
    out = np.full(h.shape, -1, dtype=np.int64)
    if h.size == 0:
        return out
    valid = (h > 0) & (w > 0)
    hv, wv = np.where(valid, h, 1), np.where(valid, w, 1)
    valid &= np.maximum(hv, wv) / np.minimum(hv, wv) <= preset.aspect_ratio_limit
    out[valid] = family_of(preset).image_tokens_batch(
        preset, hv[valid], wv[valid], min_pixels=min_pixels, max_pixels=max_pixels
    )
    return out


def sample_video_frames(
    preset: ModelPreset,
    n_frames: int,
    video_fps: float,
    *,
    max_num_frames: int | None = None,
    mode: FramesMode = "uniform",
) -> list[int]:
    """Indices of the frames the model's sampler takes from an ``n_frames`` video at ``video_fps``.

    qwen2/2.5 (``video_sampler="qwen_vl_utils"``): qwen-vl-utils 0.0.14, ``torch.linspace(0, T-1, n).round()``
    with an even ``n``; a one-frame video gives ``[0]`` (the frame list is padded by repeating the last
    frame, ``grid_t = 1``). qwen3: transformers ``np.linspace(0, T-1, n).round()`` (``n`` may be odd; the
    processor pads; fewer than 2 frames raise, as its ``smart_resize`` does). uniform (tiled models):
    ``np.linspace(0, T-1, min(max_frames, T)).round()``; none: raises. Then the ``max_num_frames`` knob,
    if the sampler returned more (:func:`~.sampling.thin_frames`).
    """
    if preset.video_sampler == "none":
        raise ValueError(f"model preset {preset.name!r} takes no video input")
    family = family_of(preset)
    fewest = max(1, family.min_video_frames(preset))
    if n_frames < fewest:
        raise VideoTooShortError(
            f"video has {n_frames} frame(s); {preset.name}'s video processor needs at least {fewest}"
        )
    if not video_fps > 0:
        raise ValueError(f"video_fps must be > 0, got {video_fps}")
    indices = family.sample_frames(preset, n_frames, video_fps)
    return thin_frames(indices, max_num_frames, mode, preset.temporal_patch_size)


def video_tokens(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    *,
    frame_cap: int | None,
    indices: Sequence[int] | None = None,
    video_fps: float | None = None,
) -> VideoTokens:
    """Tokens of one video of ``n_sampled`` frames (after sampling) of size ``height`` x ``width``, each
    frame capped at ``frame_cap`` pixels under the preset's own video bounds (None: those bounds alone; the
    token count passes :attr:`~.pixel_bounds.PixelBounds.video_frame_cap`).

    Qwen: ``tokens = ceil(n / temporal_patch) * (H / factor) * (W / factor)``; tiled presets:
    ``n * tokens_per_tile`` (one tile a frame; their frame labels are text, counted by
    :func:`count_sample_tokens`, so ``extra_text_tokens`` is 0 here); LLaVA presets take no video
    (ValueError). For timestamp presets (Qwen3) ``indices`` (the sampled frame indices) are required and
    ``video_fps`` defaults to 24 as in transformers (see ``VideoTokens`` for how ``extra_text_tokens``
    relates to the §1 rule).
    """
    return family_of(preset).video_tokens(
        preset, n_sampled, height, width, frame_cap=frame_cap, indices=indices, video_fps=video_fps
    )
