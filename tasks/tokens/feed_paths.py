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

A path says what it feeds as one text with a pad per visual span (:meth:`FeedPath.expand`): the counts
and the ``--seq-len`` truncation points (:meth:`FeedPath.layout`: where the last visual span ends and the
first supervised token sits) are both read off that text, so they describe the same sequence.

Paths are found by name in :data:`FEED_PATHS` (``TokenOptions.feed_path``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...schemas.presets import ModelPreset
from ..geometry import ExpandedText, PixelBounds, visual_spans
from .bridge_fed import FED_VIDEO, FedGeometry, expand_qwen3_videos, fed_image, media_first
from .count import SampleTokens, expand_sample
from .seq_len import SequenceLayout, layout_of
from .text import render_chat
from .token_input import TokenInput

__all__ = ["FEED_PATHS", "BridgeCollateFeed", "FeedPath", "ProcessorFeed", "fed_geometry"]

Messages = Sequence[Mapping[str, Any]]


class FeedPath(ABC):
    #: store every image at the processor's size, also inside ``[min_pixels, max_pixels]``
    align_images: bool = False
    #: tokens past a ``--seq-len`` cut that still train as targets (:func:`~.seq_len.fit_seq_len`)
    label_reach: int = 0

    @abstractmethod
    def expand(self, sample: TokenInput) -> ExpandedText:
        """The sequence this path feeds for the sample, as text with one pad per visual span (and the spans'
        offsets)."""

    def fed(self, checked: SampleTokens, sample: TokenInput) -> SampleTokens:
        """The fed counts of a sample whose checked counts are ``checked``."""
        exp = self.expand(sample)
        text = sample.tokenizer.count(exp.text) - exp.pads
        visual = exp.visual_tokens
        return SampleTokens(text, visual, text + visual, exp.per_image, exp.per_video)

    def layout(self, sample: TokenInput) -> SequenceLayout:
        """Where the fed sequence's last visual span ends and its first supervised token sits."""

        def expand(msgs: Messages) -> ExpandedText:
            return self.expand(replace(sample, messages=msgs))

        return layout_of(expand, sample.messages, sample.tokenizer)


class ProcessorFeed(FeedPath):
    """The processor on the stored pixels is what is fed: the checked counts."""

    def expand(self, sample: TokenInput) -> ExpandedText:
        return expand_sample(
            sample.messages, sample.preset, sample.image_sizes, sample.videos, bounds=sample.bounds
        )

    def fed(self, checked: SampleTokens, sample: TokenInput) -> SampleTokens:
        return checked  # the same text, counted once


def fed_geometry(preset: ModelPreset, bounds: PixelBounds) -> FedGeometry:
    """The fed path's numbers from a Qwen preset and the run's pixel ``bounds`` (the recipe's image bounds,
    which the collate passes to the processor call; its videos keep the preset's video bounds)."""
    if preset.video_min_pixels is None or preset.video_max_pixels is None:
        raise ValueError(f"preset {preset.name!r} has no video bounds: not a Qwen-VL model")
    return FedGeometry(
        patch_size=preset.patch_size,
        merge_size=preset.merge_size,
        temporal_patch_size=preset.temporal_patch_size,
        min_pixels=bounds.image_min_pixels,
        max_pixels=bounds.image_max_pixels,
        video_min_pixels=preset.video_min_pixels,
        video_max_pixels=preset.video_max_pixels,
        fps=preset.fps,
        min_frames=preset.min_frames,
        max_frames=preset.max_frames,
    )


class BridgeCollateFeed(FeedPath):
    """Megatron-Bridge 0.6.2's ``QwenVLTaskEncoder.batch()`` (``qwen2_5_collate_fn``), in its padded and its
    in-batch packed form alike (both call the processor the same way per sample): every turn's media first,
    images and videos as :mod:`.bridge_fed` models them, Qwen3's per-group video blocks inside the
    template's kept ``<|vision_start|>`` / ``<|vision_end|>``."""

    align_images = True
    # the collate shifts the labels (input_ids[1:]) before pad_or_truncate_sequence_batch cuts them, so the
    # token right after the cut is still the last position's target
    label_reach = 1

    def expand(self, sample: TokenInput) -> ExpandedText:
        preset, image_sizes, videos = sample.preset, sample.image_sizes, sample.videos
        geo = fed_geometry(preset, sample.bounds)
        per_image = [fed_image(geo, h, w)[0] for h, w in image_sizes]
        video_of = FED_VIDEO[preset.video_sampler]
        fed_videos = [video_of(geo, v.n_sampled_frames, v.height, v.width) for v in videos]
        text, n_img, n_vid = render_chat(media_first(sample.messages), preset)
        if (n_img, n_vid) != (len(image_sizes), len(videos)):
            raise ValueError(
                f"sample has {n_img} image and {n_vid} video part(s) but {len(image_sizes)} image size(s) "
                f"and {len(videos)} video spec(s)"
            )
        if preset.timestamps:  # Qwen3: one block per temporal group of the frames sampled again
            text, _ = expand_qwen3_videos(text, fed_videos, preset.temporal_patch_size)
            groups = [[f.tokens // f.grid_t] * f.grid_t for f in fed_videos]
        else:
            groups = [[f.tokens] for f in fed_videos]
        ends, toks = visual_spans(text, per_image, groups)
        pads = len(per_image) + sum(len(g) for g in groups)
        return ExpandedText(text, pads, per_image, [f.tokens for f in fed_videos], ends, toks)


FEED_PATHS: dict[str, FeedPath] = {"processor": ProcessorFeed(), "bridge_collate": BridgeCollateFeed()}
