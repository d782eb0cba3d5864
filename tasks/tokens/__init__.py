from __future__ import annotations

from .count import SampleTokens, count_sample_tokens
from .feed_paths import FEED_PATHS, FedSample
from .seq_len import SeqLenFit, apply_seq_len
from .text import TextTokenizer

__all__ = [
    "FEED_PATHS",
    "FedSample",
    "SampleTokens",
    "SeqLenFit",
    "TextTokenizer",
    "apply_seq_len",
    "count_sample_tokens",
]
