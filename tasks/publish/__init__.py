from __future__ import annotations

from .listing import published_subsets, read_manifest
from .metadataset import dataset_splits, ensure_dataset_config
from .publish import PublishResult, publish_metadataset, publish_subset
from .report import ValidationReport, format_reports
from .rolling import parse_size
from .shards_suite import ShardsGateFailed, shards_check
from .splits import EmptyTrainSplitError, metadataset_val_problem, val_split_note
from .validate import validate_blend, validate_output, validate_subset

__all__ = [
    "EmptyTrainSplitError",
    "PublishResult",
    "ShardsGateFailed",
    "ValidationReport",
    "dataset_splits",
    "ensure_dataset_config",
    "format_reports",
    "metadataset_val_problem",
    "parse_size",
    "publish_metadataset",
    "publish_subset",
    "published_subsets",
    "read_manifest",
    "shards_check",
    "val_split_note",
    "validate_blend",
    "validate_output",
    "validate_subset",
]
