"""``vlmforge-shards.json``: what a published dataset holds, shard by shard, with the keys in write order.

Written last into the staged dataset (``[{shard, split, samples, bytes, sha256, tokens, keys}]``), it is
the marker of a published subset and the expectation the validator and the quality gate read back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..manifests import OutputLayout
from .samples import SPLITS, ShardInfo

__all__ = [
    "MANIFEST_NAME",
    "expected_keys",
    "published_subsets",
    "read_manifest",
    "shard_of_key",
    "write_listing",
]

MANIFEST_NAME = "vlmforge-shards.json"


def write_listing(root: Path, shards: list[tuple[ShardInfo, list[str]]]) -> None:
    """Write the listing of ``root`` from (shard, its keys in write order)."""
    entries: list[dict[str, Any]] = [
        {
            "shard": shard.shard,
            "split": shard.split,
            "samples": shard.samples,
            "bytes": shard.bytes,
            "sha256": shard.sha256,
            "tokens": shard.tokens,
            "keys": keys,
        }
        for shard, keys in shards
    ]
    (root / MANIFEST_NAME).write_text(
        json.dumps(entries, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def read_manifest(dataset: Path) -> list[dict[str, Any]]:
    """The ``vlmforge-shards.json`` list of a dataset written by the shard writer."""
    data = json.loads((Path(dataset) / MANIFEST_NAME).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{dataset}/{MANIFEST_NAME}: expected a list")
    return data


def expected_keys(dataset: Path) -> dict[str, list[str]]:
    """Split -> keys in write order (from the manifest); the ``expected`` argument of the validator."""
    out: dict[str, list[str]] = {split: [] for split in SPLITS}
    for entry in read_manifest(dataset):
        out.setdefault(entry["split"], []).extend(entry["keys"])
    return out


def shard_of_key(dataset: Path) -> dict[str, str]:
    """Key -> the shard it was written to."""
    return {key: entry["shard"] for entry in read_manifest(dataset) for key in entry["keys"]}


def published_subsets(out: str) -> list[str]:
    """Subsets with a published Energon dataset under ``OUT/energon``."""
    root = Path(OutputLayout(out).energon)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_NAME).is_file()
    )
