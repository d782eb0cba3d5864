from __future__ import annotations

from .build_batch import build_batch
from .stats import BatchStats

__all__ = [
    "BatchStats",
    "build_batch",
]
