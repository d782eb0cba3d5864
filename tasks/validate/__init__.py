"""Checking a published Energon dataset as the trainer reads it: the run's read-back of each subset and
``vlmforge validate`` (the datasets against the run's manifests, every media part decoded as the trainer
decodes it, the ``.nv-meta`` index, and the blends' yaml). It reads what the publish stage wrote through
publish's front door and changes nothing in the output."""

from __future__ import annotations

from .check_report import ValidationReport, format_reports
from .dataset_check import validate_blend, validate_output, validate_subset
from .media_check import media_problems
from .readback import validate_energon_dataset

__all__ = [
    "ValidationReport",
    "format_reports",
    "media_problems",
    "validate_blend",
    "validate_energon_dataset",
    "validate_output",
    "validate_subset",
]
