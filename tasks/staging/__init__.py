"""The staging stage: a public benchmark set (``--format``) staged into the release layout the pipeline
reads, and references into the content store."""

from __future__ import annotations

from .stage import as_released, stage_run_source
from .store_refs import is_store_ref, read_store_ref

__all__ = [
    "as_released",
    "is_store_ref",
    "read_store_ref",
    "stage_run_source",
]
