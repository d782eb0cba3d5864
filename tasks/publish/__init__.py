"""The publish stage: a subset's committed manifests to a live Energon dataset (tars, index, atomic swap)
and the metadataset over the published subsets. Checking a published output is the validate stage's."""

from __future__ import annotations

from .current import current_publish, forget_current, publish_fingerprint, record_current
from .formats import format_of_dataset
from .listing import MANIFEST_NAME, listing_table, published_subsets, read_manifest, shards_of
from .metadataset import dataset_splits, ensure_dataset_config
from .prepare import INDEX_SQLITE, META
from .publish import PublishResult, publish_metadataset, publish_subset
from .remote_copy import dataset_copy, energon_view
from .shards_suite import ShardsGateFailed, shards_check
from .splits import EmptyTrainSplitError, metadataset_val_problem, val_split_note
from .tar import file_sha256

__all__ = [
    "INDEX_SQLITE",
    "MANIFEST_NAME",
    "META",
    "EmptyTrainSplitError",
    "PublishResult",
    "ShardsGateFailed",
    "current_publish",
    "dataset_copy",
    "dataset_splits",
    "energon_view",
    "ensure_dataset_config",
    "file_sha256",
    "forget_current",
    "format_of_dataset",
    "listing_table",
    "metadataset_val_problem",
    "publish_fingerprint",
    "publish_metadataset",
    "publish_subset",
    "published_subsets",
    "read_manifest",
    "record_current",
    "shards_check",
    "shards_of",
    "val_split_note",
]
