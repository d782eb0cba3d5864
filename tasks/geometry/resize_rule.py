"""The factor-aligned resize every family's sizes start from.

``smart_resize`` is transformers' Qwen2-VL resize (docs/visual-tokens.md §2.1). It lives here, not in the
Qwen family, because the pipeline itself stores oversized images of EVERY model at ``smart_resize(h, w,
preset.factor, ...)`` (:func:`pipeline_size`, docs/visual-tokens.md §8.2.3): Qwen's own resize of the stored
size is then a no-op, tiled and LLaVA models choose their tiles from it.
"""

from __future__ import annotations

import math

from ...schemas.presets import ModelPreset

__all__ = ["AspectRatioError", "check_aspect", "pipeline_size", "smart_resize"]


class AspectRatioError(ValueError):
    """Image/frame side ratio above the model's limit (200 for Qwen), or a side of size 0."""


def check_aspect(height: int, width: int, limit: float) -> None:
    """Raise :class:`AspectRatioError` for a side <= 0 or a side ratio above ``limit``."""
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
    check_aspect(height, width, aspect_ratio_limit)
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


def pipeline_size(
    preset: ModelPreset,
    height: int,
    width: int,
    *,
    min_pixels: int,
    max_pixels: int,
) -> tuple[int, int]:
    """(height, width) of an image as the pipeline stores it: images over ``max_pixels`` (the run's
    resolved image bounds, :class:`~.pixel_bounds.PixelBounds`) are resized once to ``smart_resize(h, w,
    preset.factor, min_pixels, max_pixels)``; others are kept.

    For Qwen presets the model's own resize of the stored size is then a no-op; for tiled and LLaVA presets
    the tiles are chosen from this stored size (docs/visual-tokens.md §8.2.3: downscale to <= max_pixels
    before tiling).
    """
    check_aspect(height, width, preset.aspect_ratio_limit)
    if height * width <= max_pixels:
        return height, width
    return smart_resize(
        height,
        width,
        preset.factor,
        min(min_pixels, max_pixels),
        max_pixels,
        aspect_ratio_limit=preset.aspect_ratio_limit,
    )
