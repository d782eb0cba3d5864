from __future__ import annotations

from .stage import StagedRelease, as_released, stage_run_source, stage_source
from .store_refs import is_store_ref, read_store_ref

__all__ = [
    "StagedRelease",
    "as_released",
    "is_store_ref",
    "read_store_ref",
    "stage_run_source",
    "stage_source",
]
