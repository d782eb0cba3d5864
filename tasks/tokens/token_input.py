"""One sample as the token counters see it: its messages and its stored media's sizes, under the run's model
preset, text tokenizer and pixel bounds (``--max-pixels``, ``--min-pixels``). The checked count, a feed path's
fed count and its ``--seq-len`` layout all read the same one (:mod:`.feed_paths`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...schemas.presets import ModelPreset
from ..geometry import PixelBounds, VideoSpec
from .count import SampleTokens, count_sample_tokens
from .text import TextTokenizer


@dataclass(frozen=True)
class TokenInput:
    messages: Sequence[Mapping[str, Any]]
    image_sizes: Sequence[tuple[int, int]]  # (height, width) of each image part as stored, in order
    videos: Sequence[VideoSpec]  # one per video part, in order
    preset: ModelPreset
    tokenizer: TextTokenizer
    bounds: PixelBounds  # the run's (ModelGeometry.bounds)

    def checked(self) -> SampleTokens:
        """What the trainer's per-sample check counts: the processor on the stored pixels."""
        return count_sample_tokens(
            self.messages,
            self.preset,
            self.tokenizer,
            self.image_sizes,
            self.videos,
            bounds=self.bounds,
        )
