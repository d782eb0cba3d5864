"""Publish stage: turn one subset's committed manifests into its Energon dataset, then record the shards.

Reads the ok samples' records in line order, pulls their media from the content store by ``out_sha256``,
and hands them to the shard writer, which publishes the dataset atomically. Then the ``shards`` table is
written and each ``samples`` part gets its ``shard`` column filled.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from vlmforge.tasks.manifests import (
    FINGERPRINT_KEY,
    STATS_KEY,
    OutputLayout,
    part_metadata,
    read_records,
    read_table,
    write_part,
)
from vlmforge.tasks.shards import ShardSample, write_energon_dataset, write_metadataset
from vlmforge.tasks.storage import ContentStore


@dataclass
class PublishResult:
    subset: str
    samples: int
    shards: int
    bytes: int
    path: str


def _shard_samples(layout: OutputLayout, subset: str) -> Iterator[ShardSample]:
    samples = read_table(layout, "samples", subset)
    ok = samples.filter(pc.equal(samples["status"], "ok"))
    split_by_line = dict(zip(ok["line"].to_pylist(), ok["split"].to_pylist(), strict=True))
    store = ContentStore(layout.store)
    for line, text in sorted(read_records(layout, subset)):
        split = split_by_line.get(line)
        if split is None:  # a record part from a batch whose samples part was replaced since
            continue
        doc = json.loads(text)
        media: list[tuple[str, bytes]] = []
        for msg in doc["messages"]:
            for part in msg["content"]:
                if part.get("type") in ("image", "video"):
                    media.append((part["part"], store.get(_out_sha(layout, subset, line, part["index"]))))
        yield ShardSample(key=doc["vlmforge"]["key"], split=split, json=doc, media=tuple(media))


_OUT_SHA: dict[tuple[str, str], dict[tuple[int, int], str]] = {}


def _out_sha(layout: OutputLayout, subset: str, line: int, index: int) -> str:
    cache = _OUT_SHA.get((layout.out, subset))
    if cache is None:
        media = read_table(layout, "media", subset)
        cache = {
            (ln, ix): sha
            for ln, ix, sha in zip(
                media["line"].to_pylist(),
                media["index"].to_pylist(),
                media["out_sha256"].to_pylist(),
                strict=True,
            )
            if sha
        }
        _OUT_SHA[(layout.out, subset)] = cache
    return cache[(line, index)]


def publish_subset(
    layout: OutputLayout, subset: str, *, shard_max_bytes: int, shard_max_samples: int
) -> PublishResult:
    """Write ``energon/<subset>`` from the manifests; record shards and fill ``samples.shard``."""
    _OUT_SHA.pop((layout.out, subset), None)
    dest = f"{layout.energon}/{subset}"
    result = write_energon_dataset(
        _shard_samples(layout, subset),
        Path(dest),
        subset=subset,
        shard_max_bytes=shard_max_bytes,
        shard_max_samples=shard_max_samples,
    )
    _OUT_SHA.pop((layout.out, subset), None)
    shard_rows = [
        {
            "subset": subset,
            "shard": s.shard,
            "split": s.split,
            "samples": s.samples,
            "bytes": s.bytes,
            "sha256": s.sha256,
        }
        for s in result.shards
    ]
    write_part(layout, "shards", subset, 0, shard_rows)
    shard_of_key = _shard_of_key(Path(dest))
    for path in layout.parts("samples", subset):
        _fill_shards(layout, subset, path, shard_of_key)
    return PublishResult(
        subset=subset,
        samples=result.samples,
        shards=len(result.shards),
        bytes=sum(s.bytes for s in result.shards),
        path=dest,
    )


def _shard_of_key(dest: Path) -> dict[str, str]:
    listing = json.loads((dest / "vlmforge-shards.json").read_text())
    return {key: entry["shard"] for entry in listing for key in entry["keys"]}


def _fill_shards(layout: OutputLayout, subset: str, path: str, shard_of_key: dict[str, str]) -> None:
    meta = part_metadata(layout, path) or {}
    with layout.fs.open(path, "rb") as f:
        tbl = pq.read_table(f)
    keys = tbl["key"].to_pylist()
    shards = pa.array([shard_of_key.get(k) if k else None for k in keys], pa.string())
    if shards.equals(tbl["shard"].combine_chunks()):
        return
    rows = tbl.set_column(tbl.schema.get_field_index("shard"), "shard", shards).to_pylist()
    fp = meta.get(FINGERPRINT_KEY)
    stats = json.loads(meta[STATS_KEY]) if STATS_KEY in meta else None
    write_part(
        layout,
        "samples",
        subset,
        int(path.rsplit("part-", 1)[1][:5]),
        rows,
        fingerprint=fp.decode() if fp else None,
        stats=stats,
    )


def publish_metadataset(layout: OutputLayout) -> str | None:
    """Rewrite ``energon/metadataset.yaml`` over every published subset (weights proportional to samples)."""
    root = Path(layout.energon)
    if not root.is_dir():
        return None
    weights: dict[str, float] = {}
    for d in sorted(root.iterdir()):
        listing = d / "vlmforge-shards.json"
        if d.is_dir() and not d.name.startswith(".") and listing.is_file():
            n = sum(e["samples"] for e in json.loads(listing.read_text()) if e["split"] == "train")
            if n:
                weights[d.name] = float(n)
    if not weights:
        return None
    return str(write_metadataset(root, weights))
