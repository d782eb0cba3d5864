from __future__ import annotations

from .batch_pipeline import batch_lines_of, build_batch
from .normalise import Normaliser
from .stats import BatchStats

__all__ = [
    "BatchStats",
    "Normaliser",
    "batch_lines_of",
    "build_batch",
]
