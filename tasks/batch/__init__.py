from __future__ import annotations

from .batch_pipeline import build_batch
from .stats import BatchStats

__all__ = [
    "BatchStats",
    "build_batch",
]
