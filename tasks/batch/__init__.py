from __future__ import annotations

from . import batch_pipeline
from .batch_pipeline import build_batch
from .stats import BatchStats

__all__ = [
    "BatchStats",
    "batch_pipeline",
    "build_batch",
]
