"""LLaVA-1.5 and LLaVA-NeXT (anyres): the ``<image>`` feature count of transformers' ``LlavaNextProcessor``
(docs/visual-tokens.md §4).

LLaVA-1.5 (no pinpoints) gives every image ``(size / patch)^2`` features; LLaVA-NeXT picks the pinpoint
resolution that keeps the most of the image, counts the unpadded feature grid of its tiles plus one newline
feature per row, and adds the base image. No video input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ....schemas.presets import AnyresSpec, ModelPreset
from ..model_files import ModelFiles, as_dict
from ..resize_rule import AspectRatioError, pipeline_size
from .model_family import ImageTokens, VideoLayout, check_sampled
from .wrapped import WrappedFamily

__all__ = ["LlavaFamily", "llava_image_tokens", "select_best_resolution"]


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


class LlavaFamily(WrappedFamily):
    requires = (
        ("text", "a text section (placeholders and wrappers)"),
        ("anyres", "an anyres section"),
        ("chat_template", "a chat_template (LLaVA does not use ChatML)"),
    )
    video_samplers = ("none",)

    def read_folder(self, base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
        """LlavaNextImageProcessor's crop size and pinpoints, LlavaNextProcessor's feature settings."""
        pre, proc = files.preprocessor, files.processor
        anyres: dict[str, Any] = {}
        side = as_dict(pre.get("crop_size")).get("height", as_dict(pre.get("size")).get("shortest_edge"))
        if isinstance(side, int):
            anyres["image_size"] = side
        pins = pre.get("image_grid_pinpoints")
        if isinstance(pins, list):
            anyres["grid_pinpoints"] = [tuple(p) for p in pins]
        for src, dst in (
            ("patch_size", "vision_patch_size"),
            ("num_additional_image_tokens", "num_additional_image_tokens"),
            ("vision_feature_select_strategy", "feature_select"),
        ):
            if src in proc and proc[src] is not None:
                anyres[dst] = proc[src]
        return {"anyres": anyres} if anyres else {}

    def compute_image_tokens(
        self,
        preset: ModelPreset,
        height: int,
        width: int,
        min_pixels: int,
        max_pixels: int,
        n_images: int,
    ) -> ImageTokens:
        """:func:`llava_image_tokens` of the stored size."""
        if preset.anyres is None:  # the schema requires it for the llava family
            raise ValueError(f"preset {preset.name!r} has no anyres section")
        h, w = pipeline_size(preset, height, width, min_pixels=min_pixels, max_pixels=max_pixels)
        return llava_image_tokens(preset.anyres, h, w)

    def video_layout(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> VideoLayout:
        check_sampled(n_sampled)
        raise ValueError(f"model preset {preset.name!r} takes no video input")
