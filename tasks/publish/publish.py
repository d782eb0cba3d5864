"""Publish stage: turn one subset's committed manifests into its Energon dataset, then record the shards.

Reads the ok samples' records in line order and hands them to the shard writer with their media as
:class:`~vlmforge.tasks.publish.samples.MediaPart` (size and ``out_sha256`` from the ``media`` table, bytes
read from the content store only when their shard is written, so a resumed publish skips finished shards
without reading them). The writer publishes the dataset atomically. Then the ``shards`` table is written and
each ``samples`` part gets its ``shard`` column filled; a key that an earlier batch already used becomes a
``duplicate_key`` reject there (within a batch, ``build_batch`` already rejects it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...schemas.reasons import reason
from ...schemas.tables import TABLES
from ..manifests import (
    FINGERPRINT_KEY,
    STATS_KEY,
    OutputLayout,
    part_metadata,
    read_records_part,
    to_table,
    write_part,
    write_part_table,
)
from ..storage import ContentStore, is_local
from .dataset import write_energon_dataset
from .formats import DEFAULT_FORMAT
from .listing import listing_table, published_subsets, read_manifest, shards_of
from .metadataset import write_metadataset
from .remote_copy import drop_local_copy, energon_view, local_energon, push_dataset, push_file
from .samples import DatasetResult, MediaPart, ShardSample

MediaIndex = dict[tuple[int, int], list[tuple[str, int]]]


@dataclass
class PublishResult:
    subset: str
    samples: int
    shards: int
    bytes: int
    path: str
    #: shards kept from an interrupted earlier publish of the same samples (identical bytes)
    reused_shards: int = 0
    #: ok samples turned into ``duplicate_key`` rejects because an earlier batch already used their key
    duplicates: int = 0


def publish_subset(
    layout: OutputLayout,
    subset: str,
    *,
    shard_max_bytes: int,
    shard_max_samples: int,
    store: str | None = None,
    check: Callable[[Path], None] | None = None,
    sample_format: str = DEFAULT_FORMAT,
) -> PublishResult:
    """Write ``energon/<subset>`` from the manifests; record shards and fill ``samples.shard``.

    ``store`` is the content store holding the media (default ``OUT/store``); ``check`` validates the
    staged dataset before it replaces the published one (see :func:`write_energon_dataset`);
    ``sample_format`` is the Energon sample format (:data:`~.formats.FORMATS`, default Megatron-Bridge's).
    """
    dest = f"{layout.energon}/{subset}"
    local = local_energon(layout) / subset  # ``dest`` itself for a local output
    duplicates: dict[int, str] = {}
    result = write_energon_dataset(
        _shard_samples(layout, subset, duplicates, store),
        local,
        subset=subset,
        shard_max_bytes=shard_max_bytes,
        shard_max_samples=shard_max_samples,
        check=check,
        sample_format=sample_format,
    )
    push_dataset(layout, subset, local)  # an object store's copy, file by file (nothing for a local output)
    _write_shards_table(layout, subset, result)
    paths = layout.parts("samples", subset)
    for path, shards in zip(paths, _shards_by_part(layout, paths, local), strict=True):
        _fill_shards(layout, subset, path, shards, duplicates)
    drop_local_copy(layout, subset)  # uploaded: the working copy of a remote output goes
    return PublishResult(
        subset=subset,
        samples=result.samples,
        shards=len(result.shards),
        bytes=sum(s.bytes for s in result.shards),
        path=dest,
        reused_shards=result.reused_shards,
        duplicates=len(duplicates),
    )


def _media_index(layout: OutputLayout, path: str | None) -> MediaIndex:
    """(line, index) -> [(sha256, bytes)] of the stored object(s) of every media part of one batch's media
    part: one for an image or a kept video, one per frame for ``--video-mode frames``."""
    if path is None or not layout.fs.exists(path):
        return {}
    with layout.fs.open(path, "rb") as f:
        media = pq.read_table(f)
    columns = [media[c].to_pylist() for c in ("line", "index", "out_sha256", "out_bytes")]
    if "frame_sha256" in media.column_names:
        columns += [media["frame_sha256"].to_pylist(), media["frame_bytes"].to_pylist()]
    else:
        columns += [[None] * media.num_rows] * 2
    index: MediaIndex = {}
    for ln, ix, sha, size, frame_shas, frame_sizes in zip(*columns, strict=True):
        if frame_shas:
            index[(ln, ix)] = list(zip(frame_shas, frame_sizes, strict=True))
        elif sha and size is not None:
            index[(ln, ix)] = [(sha, size)]
    return index


def _shard_samples(
    layout: OutputLayout, subset: str, duplicates: dict[int, str], store_url: str | None = None
) -> Iterator[ShardSample]:
    """The subset's ok samples in line order, media as :class:`MediaPart` read from the store on demand.

    Streams one batch at a time (its samples, media and records parts: batches are numbered in line
    order), so memory does not grow with the subset's rows beyond one key per sample.
    A key already used by an earlier line (two batches whose ids sanitise alike) is not written: its line
    goes into ``duplicates`` with a ``duplicate_key`` reason, as :func:`build_batch` does within a batch.
    """
    store = ContentStore(store_url or layout.store)
    first_line: dict[str, int] = {}
    for samples_path in layout.parts("samples", subset):
        name = samples_path.rsplit("/", 1)[-1]
        with layout.fs.open(samples_path, "rb") as f:
            samples = pq.read_table(f, columns=["line", "status", "split"])
        ok = samples.filter(pc.equal(samples["status"], "ok"))
        split_by_line = dict(zip(ok["line"].to_pylist(), ok["split"].to_pylist(), strict=True))
        if not split_by_line:
            continue
        media_index = _media_index(layout, f"{layout.table_dir('media', subset)}/{name}")
        for line, text in sorted(
            read_records_part(layout, f"{layout.manifests}/records/subset={subset}/{name}")
        ):
            split = split_by_line.get(line)
            if split is None:  # a record part from a batch whose samples part was replaced since
                continue
            doc = json.loads(text)
            key = doc["vlmforge"]["key"]
            if key in first_line:
                duplicates[line] = reason("duplicate_key", f"{key} already used by line {first_line[key]}")
                continue
            first_line[key] = line
            media = _media_parts(doc, media_index, line, store)
            yield ShardSample(key=key, split=split, json=doc, media=media, text=text)


def _media_parts(
    doc: dict[str, Any], media_index: MediaIndex, line: int, store: ContentStore
) -> tuple[MediaPart, ...]:
    """The record's media content parts (a video stored as frames: one part per frame), in order."""
    media: list[MediaPart] = []
    for msg in doc["messages"]:
        for part in msg["content"]:
            if isinstance(part, dict) and part.get("type") in ("image", "video"):
                names = part["frames"] if "frames" in part else [part["part"]]
                objects = media_index[(line, part["index"])]
                for name, (sha, size) in zip(names, objects, strict=True):
                    media.append(MediaPart(name=name, size=size, sha256=sha, load=partial(store.get, sha)))
    return tuple(media)


def _write_shards_table(layout: OutputLayout, subset: str, result: DatasetResult) -> None:
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


def _shards_by_part(layout: OutputLayout, paths: list[str], dest: Path) -> list[pa.Array]:
    """For each ``samples`` part, the shard each row's key was written to (null: none), as listed by the
    dataset at ``dest``: looked up for all parts at once, because each lookup hashes the whole listing (once
    per part, that was ~1 s of a 200,000-row publish)."""
    keys = []
    for path in paths:
        with layout.fs.open(path, "rb") as f:
            keys.append(pq.read_table(f, columns=["key"])["key"].combine_chunks())
    if not keys:
        return []
    shards = shards_of(pa.chunked_array(keys, pa.string()), listing_table(read_manifest(dest)))
    shards = shards.combine_chunks() if isinstance(shards, pa.ChunkedArray) else shards
    out, start = [], 0
    for part in keys:
        out.append(shards.slice(start, len(part)))
        start += len(part)
    return out


def _fill_shards(
    layout: OutputLayout, subset: str, path: str, shards_column: pa.Array, duplicates: dict[int, str]
) -> None:
    """Rewrite one ``samples`` part with its ``shard`` column (and its cross-batch duplicates rejected),
    keeping its fingerprint and its batch stats consistent; untouched when nothing changes."""
    meta = part_metadata(layout, path) or {}
    with layout.fs.open(path, "rb") as f:
        tbl = pq.read_table(f, schema=TABLES["samples"]).combine_chunks()
    stats = json.loads(meta[STATS_KEY]) if STATS_KEY in meta else None
    lines = tbl["line"].to_pylist()
    if any(line in duplicates for line in lines):  # rare: row by row
        rows = tbl.to_pylist()
        for row in rows:
            duplicate = duplicates.get(row["line"]) if row["status"] == "ok" else None
            if duplicate is not None:
                _reject_duplicate(row, duplicate, stats)
        tbl = to_table(rows, TABLES["samples"])
    # a rejected row's null key has no shard (nor has a row rejected just now: its key went)
    shards = pc.if_else(pc.is_null(tbl["key"]), pa.scalar(None, pa.string()), shards_column).to_pylist()
    if shards == tbl["shard"].to_pylist() and not any(line in duplicates for line in lines):
        return
    column = tbl.schema.get_field_index("shard")
    tbl = tbl.set_column(column, tbl.schema.field(column), pa.array(shards, tbl.schema.field(column).type))
    fp = meta.get(FINGERPRINT_KEY)
    index = int(path.rsplit("part-", 1)[1][:5])
    write_part_table(
        layout, "samples", subset, index, tbl, fingerprint=fp.decode() if fp else None, stats=stats
    )


def _reject_duplicate(row: dict[str, Any], why: str, stats: dict[str, Any] | None) -> None:
    """Turn an ok row into a ``duplicate_key`` reject; the committed batch stats (read back on resume)
    follow."""
    row.update(status="rejected", reason=why, key=None, split=None)
    if stats is None:
        return
    stats["ok"] = stats.get("ok", 0) - 1
    stats["rejected"] = stats.get("rejected", 0) + 1
    for name, column in (("images", "n_images"), ("videos", "n_videos")):
        stats[name] = stats.get(name, 0) - (row[column] or 0)
    for name in ("text_tokens", "visual_tokens"):
        stats[name] = stats.get(name, 0) - (row[name] or 0)


def publish_metadataset(layout: OutputLayout) -> str | None:
    """Rewrite ``energon/metadataset.yaml`` over every published subset (weights proportional to samples)."""
    with energon_view(layout) as root:
        weights: dict[str, float] = {}
        for subset in published_subsets(layout.out):
            n = sum(e["samples"] for e in read_manifest(root / subset) if e["split"] == "train")
            if n:
                weights[subset] = float(n)
        if not weights:
            return None
        path = write_metadataset(root, weights)
        push_file(layout, path, path.name)
    return str(path) if is_local(layout.fs) else f"{layout.energon}/{path.name}"
