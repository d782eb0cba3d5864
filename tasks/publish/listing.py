"""``vlmforge-shards.json``: what a published dataset holds, shard by shard, with the keys in write order.

Written last into the staged dataset (``[{shard, split, samples, bytes, sha256, tokens, keys}]``), it is
the marker of a published subset and the expectation the validator and the quality gate read back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fsspec import AbstractFileSystem

from ...schemas.sample_keys import SPLITS
from ..manifests import OutputLayout
from ..storage import is_local, read_text
from .samples import ShardInfo

__all__ = [
    "MANIFEST_NAME",
    "expected_keys",
    "published_subsets",
    "read_manifest",
    "LISTING_COLUMNS",
    "listing_table",
    "shards_of",
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


def read_manifest(dataset: Path | str, fs: AbstractFileSystem | None = None) -> list[dict[str, Any]]:
    """The ``vlmforge-shards.json`` list of a dataset written by the shard writer (a folder, or the path of
    one on ``fs``)."""
    data = json.loads(read_text(f"{dataset}/{MANIFEST_NAME}", fs))
    if not isinstance(data, list):
        raise ValueError(f"{dataset}/{MANIFEST_NAME}: expected a list")
    return data


def expected_keys(dataset: Path) -> dict[str, list[str]]:
    """Split -> keys in write order (from the manifest); the ``expected`` argument of the validator."""
    out: dict[str, list[str]] = {split: [] for split in SPLITS}
    for entry in read_manifest(dataset):
        out.setdefault(entry["split"], []).extend(entry["keys"])
    return out


#: One row per listed key, in listing order.
LISTING_COLUMNS = pa.schema([("shard", pa.string()), ("split", pa.string()), ("key", pa.string())])


def listing_table(listing: list[dict[str, Any]]) -> pa.Table:
    """The keys of a listing with their shard and split (:data:`LISTING_COLUMNS`), made as Arrow columns: a
    Python dict or row per key held 35-70 MB per 200,000 keys in the publish worker. A split or shard that
    is not a string is null; only string keys are listed."""
    keys_of = [_string_keys(entry.get("keys")) for entry in listing]
    counts = [len(keys) for keys in keys_of]

    def per_key(name: str) -> pa.Array:
        values = [entry.get(name) if isinstance(entry.get(name), str) else None for entry in listing]
        return pa.array(np.repeat(np.array(values, dtype=object), counts), pa.string())

    keys = pa.array([key for entry_keys in keys_of for key in entry_keys], pa.string())
    return pa.table([per_key("shard"), per_key("split"), keys], LISTING_COLUMNS)


def _string_keys(keys: Any) -> list[str]:
    return [key for key in keys if isinstance(key, str)] if isinstance(keys, list) else []


def shards_of(keys: pa.ChunkedArray | pa.Array, listing: pa.Table) -> pa.ChunkedArray | pa.Array:
    """The shard each of ``keys`` was first written to by ``listing`` (a :func:`listing_table`), null for a
    key it does not list."""
    return pc.take(listing["shard"], pc.index_in(keys, value_set=listing["key"]))


def published_subsets(out: str) -> list[str]:
    """Subsets with a published Energon dataset under ``OUT/energon``."""
    layout = OutputLayout(out)
    if not is_local(layout.fs):  # an object store: the listings under energon/, one level down
        layout.fs.invalidate_cache(layout.energon)
        found = {p.rsplit("/", 2)[-2] for p in layout.fs.glob(f"{layout.energon}/*/{MANIFEST_NAME}")}
        return sorted(n for n in found if not n.startswith("."))
    root = Path(layout.energon)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_NAME).is_file()
    )
