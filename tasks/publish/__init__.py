"""The publish stage: a subset's committed manifests to a live Energon dataset (tars, index, atomic swap),
the metadataset over the published subsets, and the checks of a published output."""

from __future__ import annotations

from .check_report import ValidationReport, format_reports
from .current import current_publish, forget_current, publish_fingerprint, record_current
from .dataset_check import validate_blend, validate_output, validate_subset
from .listing import published_subsets, read_manifest
from .metadataset import dataset_splits, ensure_dataset_config
from .publish import PublishResult, publish_metadataset, publish_subset
from .remote_copy import energon_view
from .shards_suite import ShardsGateFailed, shards_check
from .splits import EmptyTrainSplitError, metadataset_val_problem, val_split_note

__all__ = [
    "EmptyTrainSplitError",
    "PublishResult",
    "ShardsGateFailed",
    "ValidationReport",
    "current_publish",
    "dataset_splits",
    "energon_view",
    "ensure_dataset_config",
    "forget_current",
    "format_reports",
    "metadataset_val_problem",
    "publish_fingerprint",
    "publish_metadataset",
    "publish_subset",
    "published_subsets",
    "read_manifest",
    "record_current",
    "shards_check",
    "val_split_note",
    "validate_blend",
    "validate_output",
    "validate_subset",
]
