from __future__ import annotations

from . import jsonl_batch
from .jsonl_batch import parse_batch
from .refs import normalize_ref, unsafe_ref_reason

__all__ = [
    "jsonl_batch",
    "normalize_ref",
    "parse_batch",
    "unsafe_ref_reason",
]
