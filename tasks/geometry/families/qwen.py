"""Qwen2-VL, Qwen2.5-VL and Qwen3-VL: one visual token per ``factor x factor`` pixels of the smart_resize
grid (docs/visual-tokens.md §2).

Images: ``(H / factor) * (W / factor)`` after :func:`~..resize.smart_resize`. Videos: ``ceil(n /
temporal_patch) * (H / factor) * (W / factor)`` with the frame size of the preset's sampler
(:mod:`.qwen_video`). In the text every media item is ``<|vision_start|>`` pads ``<|vision_end|>``; Qwen3
writes one such block per temporal group, each after its ``<t seconds>`` timestamp.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ....schemas.presets import ModelPreset
from ..model_files import ModelFiles, as_dict
from ..pixel_bounds import PixelBounds
from ..resize_rule import smart_resize
from .model_family import (
    ExpandedText,
    ImageTokens,
    ModelFamily,
    VideoLayout,
    VideoSpec,
    VideoTokens,
    check_sampled,
)
from .qwen_video import QWEN_VIDEO_SAMPLERS, group_timestamps, timestamp_text, timestamp_tokens

__all__ = ["IMAGE_PAD", "IMAGE_PLACEHOLDER", "VIDEO_PAD", "VIDEO_PLACEHOLDER", "QwenFamily"]

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
IMAGE_PLACEHOLDER = f"{VISION_START}{IMAGE_PAD}{VISION_END}"
VIDEO_PLACEHOLDER = f"{VISION_START}{VIDEO_PAD}{VISION_END}"

_PAD_RE = re.compile(r"<\|(image|video)_pad\|>")


def _check_bounds(min_pixels: int, max_pixels: int) -> None:
    if max_pixels < min_pixels:
        raise ValueError(f"max_pixels {max_pixels} is below min_pixels {min_pixels}")


class QwenFamily(ModelFamily):
    reports_tiles = False
    requires = (("video_min_pixels", "video_min_pixels"), ("video_max_pixels", "video_max_pixels"))
    video_samplers = ("qwen_vl_utils", "qwen3")
    timestamps = True

    def read_folder(self, base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
        """Qwen2VLImageProcessor's patch sizes and pixel bounds; for qwen3 also the video processor's."""
        pre, vid = files.preprocessor, files.video_preprocessor
        size = as_dict(pre.get("size"))
        out: dict[str, Any] = {}
        for key in ("patch_size", "merge_size", "temporal_patch_size"):
            if isinstance(pre.get(key), int):
                out[key] = pre[key]
        lo = pre.get("min_pixels", size.get("shortest_edge"))
        hi = pre.get("max_pixels", size.get("longest_edge"))
        if isinstance(lo, int):
            out["min_pixels"] = lo
        if isinstance(hi, int):
            out["max_pixels"] = hi
        if base.get("video_sampler") == "qwen3":  # transformers' Qwen3 video processor reads its config
            vsize = as_dict(vid.get("size"))
            if isinstance(vsize.get("shortest_edge"), int):
                out["video_min_pixels"] = vsize["shortest_edge"]
            if isinstance(vsize.get("longest_edge"), int):
                out["video_max_pixels"] = vsize["longest_edge"]
            for key in ("fps", "min_frames", "max_frames"):
                if isinstance(vid.get(key), int | float) and not isinstance(vid.get(key), bool):
                    out[key] = vid[key]
        return out

    def resize_factor(self, preset: ModelPreset) -> int | None:
        return preset.factor

    def compute_image_tokens(
        self,
        preset: ModelPreset,
        height: int,
        width: int,
        min_pixels: int,
        max_pixels: int,
        n_images: int,
    ) -> ImageTokens:
        _check_bounds(min_pixels, max_pixels)
        f = preset.factor
        rh, rw = smart_resize(
            height, width, f, min_pixels, max_pixels, aspect_ratio_limit=preset.aspect_ratio_limit
        )
        return ImageTokens(tokens=(rh // f) * (rw // f), resized_height=rh, resized_width=rw)

    def image_tokens_batch(
        self,
        preset: ModelPreset,
        heights: np.ndarray,
        widths: np.ndarray,
        *,
        min_pixels: int,
        max_pixels: int,
    ) -> np.ndarray:
        """``smart_resize`` vectorised with numpy; float64 division, ``np.round`` (ties to even, like Python's
        ``round``), ``np.sqrt``, floor and ceil are the same IEEE operations as the scalar code, so the
        results are identical."""
        _check_bounds(min_pixels, max_pixels)
        lo, hi = min_pixels, max_pixels
        f = preset.factor
        hf, wf = heights.astype(np.float64), widths.astype(np.float64)
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
        result: np.ndarray = (h_bar // f) * (w_bar // f)
        return result

    def min_video_frames(self, preset: ModelPreset) -> int:
        return QWEN_VIDEO_SAMPLERS[preset.video_sampler].min_frames(preset)

    def sample_frames(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        return QWEN_VIDEO_SAMPLERS[preset.video_sampler].frame_indices(preset, n_frames, video_fps)

    def video_layout(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> VideoLayout:
        check_sampled(n_sampled)
        sampler = QWEN_VIDEO_SAMPLERS[preset.video_sampler]
        rh, rw = sampler.frame_size(preset, n_sampled, height, width, frame_cap)
        f = preset.factor
        grid_t = math.ceil(n_sampled / preset.temporal_patch_size)
        return VideoLayout(grid_t, (rh // f) * (rw // f), rh, rw)

    def video_tokens(
        self,
        preset: ModelPreset,
        n_sampled: int,
        height: int,
        width: int,
        *,
        frame_cap: int | None,
        indices: Sequence[int] | None = None,
        video_fps: float | None = None,
    ) -> VideoTokens:
        """For timestamp presets (Qwen3) ``extra_text_tokens = sum_groups(tokens("<t seconds>") + 2
        wrappers) - 3`` with the Qwen vocab count ``tokens("<t seconds>") = 5 + integer digits``."""
        got = super().video_tokens(
            preset, n_sampled, height, width, frame_cap=frame_cap, indices=indices, video_fps=video_fps
        )
        if not preset.timestamps:
            return got
        stamps = group_timestamps(preset, n_sampled, got.grid_t, indices, video_fps)
        extra = sum(timestamp_tokens(t) + 2 for t in stamps) - 3
        return VideoTokens(got.tokens, extra, got.grid_t, got.resized_height, got.resized_width)

    def placeholders(self, preset: ModelPreset) -> tuple[str, str]:
        return IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER

    def count_placeholders(self, text: str, preset: ModelPreset) -> tuple[int, int]:
        # the pads, not the whole placeholders: add_vision_id templates prefix "Picture k: " to them
        return text.count(IMAGE_PAD), text.count(VIDEO_PAD)

    def expand(
        self,
        text: str,
        preset: ModelPreset,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        bounds: PixelBounds,
        spans: bool,
    ) -> ExpandedText:
        if self.count_placeholders(text, preset) != (len(image_sizes), len(videos)):
            raise ValueError("message text contains literal <|image_pad|> / <|video_pad|> tokens")
        lo, hi = bounds.image_min_pixels, bounds.image_max_pixels
        per_image = [
            self.image_tokens(preset, h, w, min_pixels=lo, max_pixels=hi).tokens for h, w in image_sizes
        ]
        cap = bounds.video_frame_cap
        if preset.timestamps:
            expanded, per_video, group_tokens = self._stamp_videos(text, preset, videos, cap)
        else:
            expanded, per_video, group_tokens = self._plain_videos(text, preset, videos, cap)
        pads = len(image_sizes) + sum(len(g) for g in group_tokens)
        if not spans:
            return ExpandedText(expanded, pads, per_image, per_video)
        ends, toks = visual_spans(expanded, per_image, group_tokens)
        return ExpandedText(expanded, pads, per_image, per_video, ends, toks)

    def _plain_videos(
        self, text: str, preset: ModelPreset, videos: Sequence[VideoSpec], frame_cap: int | None
    ) -> tuple[str, list[int], list[list[int]]]:
        """Qwen2/2.5: one pad a video; (text, tokens per video, tokens of each span of each video)."""
        per_video = [
            self.video_tokens(preset, v.n_sampled_frames, v.height, v.width, frame_cap=frame_cap).tokens
            for v in videos
        ]
        return text, per_video, [[t] for t in per_video]

    def _stamp_videos(
        self, text: str, preset: ModelPreset, videos: Sequence[VideoSpec], frame_cap: int | None
    ) -> tuple[str, list[int], list[list[int]]]:
        """Qwen3VLProcessor: each video placeholder becomes, per temporal group, ``<t seconds>`` start pad
        end."""
        chunks = text.split(VIDEO_PLACEHOLDER)
        if len(chunks) != len(videos) + 1:
            raise ValueError("a video pad is not wrapped as <|vision_start|><|video_pad|><|vision_end|>")
        pieces = [chunks[0]]
        per_video: list[int] = []
        group_tokens: list[list[int]] = []
        for v, chunk in zip(videos, chunks[1:], strict=True):
            lay = self.video_layout(preset, v.n_sampled_frames, v.height, v.width, frame_cap)
            stamps = group_timestamps(preset, v.n_sampled_frames, lay.groups, v.indices, v.video_fps)
            pieces.extend(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps)
            pieces.append(chunk)
            per_video.append(lay.groups * lay.per_group)
            group_tokens.append([lay.per_group] * lay.groups)
        return "".join(pieces), per_video, group_tokens


def visual_spans(
    expanded: str, per_image: list[int], group_tokens: list[list[int]]
) -> tuple[list[int], list[int]]:
    """(character offset after each visual span, its tokens) in text order; a span ends one wrapper
    (``<|vision_end|>``) after its pad."""
    ends, toks = [], []
    images, vids = iter(per_image), iter(group_tokens)
    groups: list[int] = []
    for m in _PAD_RE.finditer(expanded):
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
    return ends, toks
