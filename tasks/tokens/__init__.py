from __future__ import annotations

from .count import SampleTokens, count_sample_tokens
from .feed_paths import FEED_PATHS
from .media_table import ImageSize, MediaTokens, VideoSize, media_tokens
from .seq_len import SeqLenFit, fit_seq_len, needs_layout
from .text import TextTokenizer
from .token_input import TokenInput

__all__ = [
    "FEED_PATHS",
    "ImageSize",
    "MediaTokens",
    "SampleTokens",
    "SeqLenFit",
    "TextTokenizer",
    "TokenInput",
    "VideoSize",
    "count_sample_tokens",
    "fit_seq_len",
    "media_tokens",
    "needs_layout",
]
