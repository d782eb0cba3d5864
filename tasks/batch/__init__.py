from __future__ import annotations

from .batch_pipeline import batch_lines_of, build_batch
from .normalise import Normaliser
from .stats import BatchStats
from .write import batch_fingerprint

__all__ = [
    "BatchStats",
    "Normaliser",
    "batch_fingerprint",
    "batch_lines_of",
    "build_batch",
]
