"""Qwen video: the two samplers (qwen-vl-utils for Qwen2/2.5-VL, transformers for Qwen3-VL), their frame
resizes and Qwen3's per-group timestamps (docs/visual-tokens.md §2.3-§2.5).

The two samplers differ in every step (how many frames, how they are spaced, whether the pixel budget is
per frame or over all frames), so each is one :class:`QwenVideoSampler` found by ``preset.video_sampler``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

from ....schemas.presets import ModelPreset
from ..frame_sampling import VideoTooShortError, np_linspace_round, torch_linspace_round
from ..resize_rule import check_aspect, smart_resize
from .model_family import DEFAULT_VIDEO_FPS

__all__ = [
    "QWEN_VIDEO_SAMPLERS",
    "QwenVideoSampler",
    "group_timestamps",
    "timestamp_text",
    "video_timestamps",
]


class QwenVideoSampler(ABC):
    @abstractmethod
    def min_frames(self, preset: ModelPreset) -> int:
        """The fewest frames a video may have for the model's processor to take it."""

    @abstractmethod
    def frame_indices(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        """The sampled frame indices of an ``n_frames`` video at ``video_fps``."""

    @abstractmethod
    def frame_size(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> tuple[int, int]:
        """(height, width) every sampled frame is resized to; ``frame_cap`` caps each frame under the
        preset's video bounds (None: those bounds alone)."""


def _video_bounds(preset: ModelPreset) -> tuple[int, int]:
    if preset.video_min_pixels is None or preset.video_max_pixels is None:  # the schema requires them
        raise ValueError(f"preset {preset.name!r} sets no video_min_pixels / video_max_pixels")
    return preset.video_min_pixels, preset.video_max_pixels


# ----------------------------------------------------------------------------------- qwen-vl-utils 0.0.14


def qvu_smart_resize(
    height: int,
    width: int,
    factor: int,
    min_pixels: float,
    max_pixels: float,
    aspect_ratio_limit: float = 200,
) -> tuple[int, int]:
    """qwen-vl-utils 0.0.14 ``smart_resize``: ``max(factor, ...)`` on the rounding, none after the floor."""
    if max_pixels < min_pixels:
        raise ValueError(
            f"max_pixels {max_pixels} must be >= min_pixels {min_pixels} (qwen-vl-utils asserts this)"
        )
    check_aspect(height, width, aspect_ratio_limit)
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


class QwenVLUtilsSampler(QwenVideoSampler):
    """qwen-vl-utils 0.0.14 ``fetch_video`` (Qwen2/2.5-VL, Megatron-Bridge's collate)."""

    def min_frames(self, preset: ModelPreset) -> int:
        """One: the trainer gets a video as its list of frames (Bridge's ``.videos`` part, the cooker's
        decoded ``frame_indices``), and a frame list shorter than the temporal patch is padded by repeating
        its last frame (qwen-vl-utils ``fetch_video``: ``ceil_by_factor(len, 2)``; transformers
        ``Qwen2VLVideoProcessor``, which Bridge's ``QwenVLTaskEncoder`` counts with: ``-T % 2`` repeats), so
        one frame is ``grid_t = 1``, the tokens of that frame twice."""
        return 1

    def frame_indices(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        """``smart_nframes`` (fps mode; FRAME_FACTOR = temporal_patch_size = 2), then
        ``torch.linspace(0, T-1, n).round()``; a video shorter than one temporal patch gives all its
        frames (see :meth:`min_frames`)."""
        ff = preset.temporal_patch_size
        if 1 <= n_frames < ff:
            return list(range(n_frames))
        min_frames = math.ceil(preset.min_frames / ff) * ff
        max_frames = math.floor(min(preset.max_frames, n_frames) / ff) * ff
        nframes = n_frames / video_fps * preset.fps
        nframes = min(min(max(nframes, min_frames), max_frames), n_frames)
        n = math.floor(nframes / ff) * ff
        if not ff <= n <= n_frames:
            raise VideoTooShortError(f"nframes should be in [{ff}, {n_frames}], got {n}")
        return torch_linspace_round(0, n_frames - 1, n)

    def frame_size(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> tuple[int, int]:
        """Per-frame budget from the token limits and the total budget shared by the frames."""
        vmin, vmax = _video_bounds(preset)
        tps = preset.temporal_patch_size
        n_even = math.ceil(n_sampled / tps) * tps
        min_px: float = vmin
        cap: float = vmax
        if preset.video_total_pixels is not None:
            cap = min(cap, preset.video_total_pixels / n_even * tps)
        max_px = max(cap, int(min_px * 1.05))
        if frame_cap is not None:
            max_px = min(frame_cap, max_px)
        return qvu_smart_resize(height, width, preset.factor, min_px, max_px, preset.aspect_ratio_limit)


# ----------------------------------------------------------------------------------- transformers Qwen3-VL


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
    check_aspect(height, width, aspect_ratio_limit)
    if height < factor or width < factor:  # transformers 5.25 upscales tiny frames first (4.57.1 raised)
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


class Qwen3Sampler(QwenVideoSampler):
    """transformers ``Qwen3VLVideoProcessor``."""

    def min_frames(self, preset: ModelPreset) -> int:
        """The temporal patch: the processor's ``smart_resize`` refuses fewer frames (``t:1 must be larger
        than temporal_factor:2``) before its patchify could pad them, so Bridge's ``QwenVLTaskEncoder``
        fails on a one-frame video."""
        return preset.temporal_patch_size

    def frame_indices(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        """``sample_frames`` (fps mode), then ``np.linspace(0, T-1, n).round()`` (``n`` may be odd; the
        processor pads)."""
        n = int(n_frames / video_fps * preset.fps)
        n = min(max(n, preset.min_frames), preset.max_frames, n_frames)
        return np_linspace_round(0, n_frames - 1, n)

    def frame_size(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> tuple[int, int]:
        vmin, vmax = _video_bounds(preset)
        f, limit = preset.factor, preset.aspect_ratio_limit
        if frame_cap is not None:
            # the cap applies to each frame; the model's all-frame budget then applies to those frames
            lo = min(vmin, frame_cap)
            height, width = smart_resize(height, width, f, lo, frame_cap, aspect_ratio_limit=limit)
        return _qwen3_video_resize(n_sampled, height, width, preset.temporal_patch_size, f, vmin, vmax, limit)


QWEN_VIDEO_SAMPLERS: dict[str, QwenVideoSampler] = {
    "qwen_vl_utils": QwenVLUtilsSampler(),
    "qwen3": Qwen3Sampler(),
}


# ----------------------------------------------------------------------------------- Qwen3 timestamps


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


def timestamp_tokens(seconds: float) -> int:
    """Qwen vocab tokens of :func:`timestamp_text`: "<", one per digit and for ".", " seconds", ">" (§2.5)."""
    return 3 + len(f"{seconds:.1f}")


def group_timestamps(
    preset: ModelPreset, n_sampled: int, grid_t: int, indices: Sequence[int] | None, video_fps: float | None
) -> list[float]:
    """The timestamp of each of a video's ``grid_t`` temporal groups."""
    if indices is None:
        raise ValueError(
            f"preset {preset.name!r} writes per-group timestamps: pass the sampled frame indices"
        )
    if len(indices) != n_sampled:
        raise ValueError(f"got {len(indices)} frame indices for {n_sampled} sampled frames")
    fps = DEFAULT_VIDEO_FPS if video_fps is None else video_fps
    if not fps > 0:
        raise ValueError(f"video_fps must be > 0, got {fps}")
    stamps = video_timestamps(indices, fps, preset.temporal_patch_size)
    assert len(stamps) == grid_t
    return stamps
