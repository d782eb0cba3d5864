"""JSONL lines to normalised records or rejects."""

from __future__ import annotations

from .jsonl_batch import parse_batch
from .lines import iter_line_chunks, split_lines
from .refs import normalize_ref, unsafe_ref_reason

__all__ = [
    "iter_line_chunks",
    "normalize_ref",
    "parse_batch",
    "split_lines",
    "unsafe_ref_reason",
]
