"""The one interface every model family implements, and the values it returns.

A family is how a model turns media into visual tokens and writes them into its token sequence: the Qwen
resize grid, InternVL / Nemotron tiles, LLaVA anyres. :mod:`..count` and the CLI only ever talk to a
:class:`ModelFamily` found through ``FAMILIES[preset.family]``, so a new family is one module here plus one
registry line, never a new branch in the counting code.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....schemas.presets import ModelPreset
from ..frame_sampling import VideoTooShortError
from ..model_files import ModelFiles
from ..pixel_bounds import PixelBounds
from ..resize_rule import AspectRatioError, smart_resize

__all__ = [
    "DEFAULT_VIDEO_FPS",
    "ExpandedText",
    "ImageTokens",
    "ModelFamily",
    "VideoLayout",
    "VideoSpec",
    "VideoTokens",
    "check_sampled",
]

# transformers' fallback when a video has no fps metadata (Qwen3VLProcessor / VideoProcessor warn and use 24)
DEFAULT_VIDEO_FPS = 24.0


@dataclass(frozen=True)
class ImageTokens:
    tokens: int
    # the size the model's vision tower sees: Qwen the smart_resize grid, tiled models the tile grid
    # (cols * tile x rows * tile, thumbnail excluded), LLaVA-NeXT the selected pinpoint
    resized_height: int
    resized_width: int
    tiles: int = 1  # tiled models: tiles incl. thumbnail; LLaVA-NeXT: views incl. the base image


@dataclass(frozen=True)
class VideoLayout:
    """How a video's visual tokens are grouped: ``groups`` spans (Qwen temporal groups, tiled frames) of
    ``per_group`` tokens each, from frames the model sees at ``resized_height`` x ``resized_width``."""

    groups: int
    per_group: int
    resized_height: int
    resized_width: int


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


@dataclass(frozen=True)
class VideoSpec:
    n_sampled_frames: int
    height: int
    width: int
    indices: Sequence[int] | None = None
    video_fps: float | None = None


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


def check_sampled(n_sampled: int) -> None:
    if n_sampled < 1:
        raise VideoTooShortError(f"video has {n_sampled} sampled frame(s)")


_ImageKey = tuple[int, int, int, int, int]
_IMAGE_CACHE: dict[int, tuple[ModelPreset, dict[_ImageKey, ImageTokens]]] = {}


class ModelFamily(ABC):
    """Visual tokens, processed sizes and media text of one model family (stateless: the preset carries
    every number)."""

    # whether ImageTokens.tiles means something to a reader (tiles / anyres views; a Qwen grid has none)
    reports_tiles: bool = True
    # What the family's presets must set: (field, what it is) of fields that must not be None
    requires: tuple[tuple[str, str], ...] = ()
    video_samplers: tuple[str, ...] | None = None  # the video samplers its presets may name (None: any)
    timestamps: bool = False  # whether it writes per-group timestamps (Qwen3)

    def check(self, preset: ModelPreset) -> None:
        """ValueError when ``preset`` lacks what this family needs or names a sampler it does not take."""
        for name, what in self.requires:
            if getattr(preset, name) is None:
                raise ValueError(f"a {preset.family} preset needs {what}")
        if self.video_samplers is not None and preset.video_sampler not in self.video_samplers:
            raise ValueError(
                f"a {preset.family} preset samples videos with {' or '.join(self.video_samplers)}, "
                f"not {preset.video_sampler}"
            )

    def read_folder(self, base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
        """Preset fields a local model folder's config files set (``--model-dir``); none by default."""
        return {}

    def stored_image_size(
        self, preset: ModelPreset, height: int, width: int, min_pixels: int, max_pixels: int
    ) -> tuple[int, int]:
        """(height, width) the pipeline stores an image outside ``[min_pixels, max_pixels]`` at: the
        factor-aligned ``smart_resize`` (ValueError for a side ratio over the preset's limit). A family
        whose processor resizes otherwise (longest edge, fixed tiles) says so here."""
        try:
            return smart_resize(height, width, preset.factor, min_pixels, max_pixels)
        except AspectRatioError as exc:
            raise ValueError(str(exc)) from exc

    @abstractmethod
    def resize_factor(self, preset: ModelPreset) -> int | None:
        """Pixels per visual-token side when the model resizes to a factor-aligned size (Qwen); None when
        tokens do not follow from the pixel count (tiles, anyres views)."""

    def image_tokens(
        self,
        preset: ModelPreset,
        height: int,
        width: int,
        *,
        min_pixels: int,
        max_pixels: int,
        n_images: int = 1,
    ) -> ImageTokens:
        """Visual tokens of one ``height`` x ``width`` image within the image bounds ``min_pixels`` /
        ``max_pixels`` (resolved: :class:`~..pixel_bounds.PixelBounds`), memoised per preset object and size
        (sizes repeat a lot in real data; ImageTokens is frozen). ``n_images`` is the sample's image count
        (tiled budgets may be split among them)."""
        entry = _IMAGE_CACHE.get(id(preset))
        if entry is None or entry[0] is not preset:
            if len(_IMAGE_CACHE) >= 8:
                _IMAGE_CACHE.clear()
            entry = (preset, {})
            _IMAGE_CACHE[id(preset)] = entry  # holds the preset, so its id cannot be reused meanwhile
        key = (height, width, min_pixels, max_pixels, n_images)
        hit = entry[1].get(key)
        if hit is None:
            hit = self.compute_image_tokens(preset, height, width, min_pixels, max_pixels, n_images)
            if len(entry[1]) >= 100_000:
                entry[1].clear()
            entry[1][key] = hit
        return hit

    @abstractmethod
    def compute_image_tokens(
        self,
        preset: ModelPreset,
        height: int,
        width: int,
        min_pixels: int,
        max_pixels: int,
        n_images: int,
    ) -> ImageTokens:
        """The family's image formula (uncached; see :meth:`image_tokens`)."""

    def image_tokens_batch(
        self,
        preset: ModelPreset,
        heights: np.ndarray,
        widths: np.ndarray,
        *,
        min_pixels: int,
        max_pixels: int,
    ) -> np.ndarray:
        """Tokens of many single images of valid sizes (int64 arrays): the scalar rule once per distinct
        size. A family may override it with a vectorised formula giving identical results."""
        pairs, inverse = np.unique(np.stack([heights, widths], axis=1), axis=0, return_inverse=True)
        per = np.array(
            [
                self.image_tokens(preset, int(a), int(b), min_pixels=min_pixels, max_pixels=max_pixels).tokens
                for a, b in pairs
            ],
            dtype=np.int64,
        )
        return per[inverse.reshape(-1)]

    def min_video_frames(self, preset: ModelPreset) -> int:
        """The fewest frames a video may have for the model's processor to take it: one temporal patch
        unless the family's processor pads a shorter video."""
        return preset.temporal_patch_size

    @abstractmethod
    def sample_frames(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        """Indices of the frames the model's own sampler takes from an ``n_frames`` video at ``video_fps``
        (before the pipeline's ``max_num_frames`` knob)."""

    @abstractmethod
    def video_layout(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> VideoLayout:
        """Token groups of a video of ``n_sampled`` frames (after sampling), each frame capped at
        ``frame_cap`` pixels under the preset's video bounds (None: those bounds alone); ValueError without
        video support."""

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
        """Tokens of one video; families writing no per-group text have ``extra_text_tokens`` 0."""
        lay = self.video_layout(preset, n_sampled, height, width, frame_cap)
        return VideoTokens(
            tokens=lay.groups * lay.per_group,
            extra_text_tokens=0,
            grid_t=lay.groups,
            resized_height=lay.resized_height,
            resized_width=lay.resized_width,
        )

    @abstractmethod
    def placeholders(self, preset: ModelPreset) -> tuple[str, str]:
        """(image, video) placeholder strings the chat template writes for one media part."""

    @abstractmethod
    def count_placeholders(self, text: str, preset: ModelPreset) -> tuple[int, int]:
        """(images, videos) a rendered chat template holds placeholders for."""

    @abstractmethod
    def expand(
        self,
        text: str,
        preset: ModelPreset,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        bounds: PixelBounds,
        spans: bool,
    ) -> ExpandedText:
        """Expand every placeholder of a rendered template the way the model's processor does within the
        run's ``bounds``, one pad per visual span (``spans=False`` may skip the span offsets)."""
