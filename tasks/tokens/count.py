"""Exact per-sample token counts for Qwen2-VL / Qwen2.5-VL / Qwen3-VL, InternVL, Nemotron VL and LLaVA-1.5 /
LLaVA-NeXT training samples, without loading a model.

Formulas: docs/visual-tokens.md (§1 counting rule, §2 Qwen resize / video / timestamps,
§3 tiling, §4 LLaVA anyres, §7 tokenizer). Each model family's formulas live in :mod:`.families`; this module
is the one entry the pipeline, the CLI and the benchmarks count through, and it never asks which family.

The counting rule (§1) for every family: render the chat template with ONE placeholder per media item, expand
each placeholder into the processor's text (wrappers, timestamps, frame labels) with ONE pad token standing
for the item's visual tokens, tokenize that text exactly, then ``text_tokens = tokens - pads``
and ``total = text_tokens + visual_tokens``. Pads are special tokens, so one pad tokenizes like N of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...schemas.presets import ModelPreset
from ..errors import ConfigError
from ..geometry import ExpandedText, PixelBounds, VideoSpec, family_of
from .text import TextTokenizer, render_chat

__all__ = ["SampleTokens", "count_sample_tokens", "expand_sample"]


# --------------------------------------------------------------------------------------------------
# One sample
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleTokens:
    text_tokens: int  # everything that is not a visual pad (template, text, wrappers, timestamps)
    visual_tokens: int
    total_tokens: int
    per_image: list[int]
    per_video: list[int]


def expand_sample(
    messages: Sequence[Mapping[str, Any]],
    preset: ModelPreset,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    *,
    bounds: PixelBounds,
    spans: bool = True,
) -> ExpandedText:
    """Render ``messages`` and expand every media placeholder the way the model's processor does within the
    run's pixel ``bounds``, with one pad per visual span. ``image_sizes`` are (height, width) per image part
    in order, ``videos`` one spec per video part in order. ``spans=False`` may skip the span offsets
    (counting needs only ``text`` and ``pads``). Raises ValueError for a count mismatch or media the model
    cannot take."""
    text, n_img, n_vid = render_chat(messages, preset)
    if n_img != len(image_sizes):
        raise ValueError(f"sample has {n_img} image part(s) but {len(image_sizes)} image size(s)")
    if n_vid != len(videos):
        raise ValueError(f"sample has {n_vid} video part(s) but {len(videos)} video spec(s)")
    return family_of(preset).expand(text, preset, image_sizes, videos, bounds, spans)


def count_sample_tokens(
    messages: Sequence[Mapping[str, Any]],
    preset: ModelPreset,
    tokenizer: TextTokenizer,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    *,
    bounds: PixelBounds,
) -> SampleTokens:
    """Exact sequence length of one sample (docs/visual-tokens.md §1):
    ``tokens(template) - n_placeholders + sum(pads) + extra text``, within the run's pixel ``bounds``
    (:class:`~vlmforge.tasks.geometry.PixelBounds`: the run's ``ModelGeometry.bounds``).

    ``image_sizes`` are (height, width) per image part in order, ``videos`` one spec per video part in order.
    For timestamp presets every video placeholder is expanded as Qwen3VLProcessor does (per group
    ``<t seconds><|vision_start|>`` pads ``<|vision_end|>``, here with one pad per group) and the result is
    tokenized, so the count stays exact when the text before a video merges with ``<`` (``":<"``, ``" <"``).
    Tiled and LLaVA presets are expanded the same way (``<img>`` pad ``</img>``, frame labels, BOS).
    """
    _check_pad(tokenizer, preset)
    exp = expand_sample(messages, preset, image_sizes, videos, bounds=bounds, spans=False)
    text_tokens = tokenizer.count(exp.text) - exp.pads
    visual = exp.visual_tokens
    return SampleTokens(
        text_tokens=text_tokens,
        visual_tokens=visual,
        total_tokens=text_tokens + visual,
        per_image=exp.per_image,
        per_video=exp.per_video,
    )


_PAD_OK: set[tuple[int, str]] = set()


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
