from __future__ import annotations

from .batch_pipeline import build_batch
from .normalise import Normaliser
from .stats import BatchStats

__all__ = [
    "BatchStats",
    "Normaliser",
    "build_batch",
]
