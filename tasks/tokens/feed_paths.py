"""What the trainer's batch path feeds the model, next to what its per-sample check counts (``--trainer``
picks the path; ``processor`` otherwise).

A trainer may count a sample twice: Megatron-Bridge's ``QwenVLTaskEncoder.encode_sample`` checks
``max_visual_tokens`` with the processor on the stored pixels (what :func:`~.count.count_sample_tokens`
gives), while its ``batch()`` feeds what ``qwen2_5_collate_fn`` makes of the sample (:mod:`.bridge_fed`).
A :class:`FeedPath` turns the checked counts into the fed ones, and says whether images should be stored on
the processor's grid: for Bridge that makes both paths agree on every image (qwen-vl-utils' factor-28 resize
then the processor's round back to the stored size; checked over 57,300 sizes for factors 28 and 32), so
the double resize no longer moves an image to another grid. Videos cannot be written so: Qwen3-VL's video
processor samples the frames again (to ``max(n / 12, 4)`` of them) whatever vlmforge stores, and the frames'
size goes through the collate's own resizes, so the fed counts are modelled.

Paths are found by name in :data:`FEED_PATHS` (``TokenOptions.feed_path``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...schemas.presets import ModelPreset
from ..geometry import VideoSpec
from .bridge_fed import (
    FED_VIDEO,
    FedGeometry,
    collate_image_size,
    expand_qwen3_videos,
    fed_image,
    media_first,
)
from .count import SampleTokens, count_sample_tokens
from .text import TextTokenizer, render_chat

__all__ = ["FEED_PATHS", "BridgeCollateFeed", "FedSample", "FeedPath", "ProcessorFeed", "geometry_of"]


@dataclass(frozen=True)
class FedSample:
    """A sample as fed: its counts, and the image sizes / video specs that lay its sequence out (for
    ``--seq-len``'s truncation point)."""

    tokens: SampleTokens
    image_sizes: list[tuple[int, int]]
    videos: list[VideoSpec]


class FeedPath(ABC):
    #: store every image at the processor's size, also inside ``[min_pixels, max_pixels]``
    align_images: bool = False

    @abstractmethod
    def fed(
        self,
        checked: SampleTokens,
        messages: Sequence[Mapping[str, Any]],
        preset: ModelPreset,
        tokenizer: TextTokenizer,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        *,
        max_pixels: int | None,
    ) -> FedSample:
        """The fed counts of a sample whose checked counts are ``checked`` (same arguments as
        :func:`~.count.count_sample_tokens`; ``preset.min_pixels`` is the run's)."""


class ProcessorFeed(FeedPath):
    """The processor on the stored pixels is what is fed: the checked counts."""

    def fed(
        self,
        checked: SampleTokens,
        messages: Sequence[Mapping[str, Any]],
        preset: ModelPreset,
        tokenizer: TextTokenizer,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        *,
        max_pixels: int | None,
    ) -> FedSample:
        return FedSample(checked, list(image_sizes), list(videos))


def geometry_of(preset: ModelPreset, max_pixels: int | None) -> FedGeometry:
    """The fed path's numbers from a Qwen preset (``min_pixels`` as the run set it) and ``--max-pixels``."""
    if preset.video_min_pixels is None or preset.video_max_pixels is None:
        raise ValueError(f"preset {preset.name!r} has no video bounds: not a Qwen-VL model")
    return FedGeometry(
        patch_size=preset.patch_size,
        merge_size=preset.merge_size,
        temporal_patch_size=preset.temporal_patch_size,
        min_pixels=preset.min_pixels,
        max_pixels=preset.max_pixels if max_pixels is None else max_pixels,
        video_min_pixels=preset.video_min_pixels,
        video_max_pixels=preset.video_max_pixels,
        fps=preset.fps,
        min_frames=preset.min_frames,
        max_frames=preset.max_frames,
    )


class BridgeCollateFeed(FeedPath):
    """Megatron-Bridge 0.6.2's ``QwenVLTaskEncoder.batch()`` (``qwen2_5_collate_fn``), in its padded and its
    in-batch packed form alike (both call the processor the same way per sample)."""

    align_images = True

    def fed(
        self,
        checked: SampleTokens,
        messages: Sequence[Mapping[str, Any]],
        preset: ModelPreset,
        tokenizer: TextTokenizer,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        *,
        max_pixels: int | None,
    ) -> FedSample:
        geo = geometry_of(preset, max_pixels)
        per_image = [fed_image(geo, h, w)[0] for h, w in image_sizes]
        video_of = FED_VIDEO[preset.video_sampler]
        fed_videos = [video_of(geo, v.n_sampled_frames, v.height, v.width) for v in videos]
        sizes = [collate_image_size(h, w) for h, w in image_sizes]
        specs = [
            VideoSpec(f.frames, f.height, f.width, indices=f.indices, video_fps=f.fps or v.video_fps)
            for f, v in zip(fed_videos, videos, strict=True)
        ]
        first = media_first(messages)
        text = checked.text_tokens
        if preset.timestamps and videos:  # Qwen3: the frames sampled again, the template's wrappers kept
            rendered, n_img, _ = render_chat(first, preset)
            expanded, video_pads = expand_qwen3_videos(rendered, fed_videos, preset.temporal_patch_size)
            text = tokenizer.count(expanded) - n_img - video_pads
        elif [m.get("content") for m in first] != [m.get("content") for m in messages]:  # media moved first
            text = count_sample_tokens(
                first, preset, tokenizer, sizes, specs, max_pixels=max_pixels
            ).text_tokens
        per_video = [f.tokens for f in fed_videos]
        visual = sum(per_image) + sum(per_video)
        tokens = SampleTokens(text, visual, text + visual, per_image, per_video)
        return FedSample(tokens, sizes, specs)


FEED_PATHS: dict[str, FeedPath] = {"processor": ProcessorFeed(), "bridge_collate": BridgeCollateFeed()}
