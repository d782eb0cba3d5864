"""Committing a batch: its fingerprint, its three manifest parts, and the check that skips a current batch.

The fingerprint hashes the batch's bytes (the JSONL's hash and the batch's offsets) and every option that can
change its output (:meth:`BatchWork.media_fingerprint`, which hashes the ``BATCH_INPUTS`` sub-models whole,
as :meth:`RunConfig.media_fingerprint` does: the same bytes, so a run's outputs stay current).
The ``samples`` part is written last and carries the fingerprint and the stats, so it doubles as the
completion marker (img2dataset's stats-file-as-marker idea): a batch killed mid-write is redone.
"""

from __future__ import annotations

import hashlib
import json

from ...schemas.records import SubsetEntry
from ...schemas.rows import MediaRow, SampleRow
from ...schemas.stage_options import BatchWork
from ..manifests import (
    FINGERPRINT_KEY,
    STATS_KEY,
    OutputLayout,
    part_metadata,
    write_part,
    write_records_part,
)
from .sample import Finished
from .stats import BatchStats, StageClock

# Appended to the fingerprint of a batch with transient fetch failures: its outcomes are recorded, but it
# is never current, so the next run retries it.
RETRY_SUFFIX = ":retry"


def batch_fingerprint(entry: SubsetEntry, index: int, work: BatchWork) -> str:
    start, end = entry.batch_offsets[index], entry.batch_offsets[index + 1]
    payload = f"{entry.jsonl_sha256}:{start}:{end}:{work.batches.batch_lines}:{work.media_fingerprint()}"
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def batch_is_current(
    layout: OutputLayout, entry: SubsetEntry, index: int, work: BatchWork
) -> BatchStats | None:
    """The committed stats of the batch when its samples part matches the current fingerprint."""
    meta = part_metadata(layout, layout.part("samples", entry.subset, index))
    if not meta or meta.get(FINGERPRINT_KEY) != batch_fingerprint(entry, index, work).encode():
        return None
    return BatchStats.from_dict(json.loads(meta.get(STATS_KEY, b"{}"))).as_done_earlier()


def write_batch(
    layout: OutputLayout,
    entry: SubsetEntry,
    index: int,
    fingerprint: str,
    parts: BatchParts,
    stats: BatchStats,
    clock: StageClock,
) -> None:
    """Write the media and records parts, then the samples part that carries the fingerprint and the stats
    and so marks the batch complete."""
    with clock.timed("write"):
        write_part(layout, "media", entry.subset, index, parts.media, fingerprint=fingerprint)
        write_records_part(layout, entry.subset, index, parts.records, fingerprint)
    clock.into(stats)
    write_part(
        layout,
        "samples",
        entry.subset,
        index,
        parts.samples,
        fingerprint=fingerprint,
        stats=stats.committed(),
    )


class BatchParts:
    """The rows of one batch's three parts, in line order."""

    def __init__(self) -> None:
        self.samples: list[SampleRow] = []
        self.media: list[MediaRow] = []
        self.records: list[tuple[int, str]] = []  # (line, shard record JSON) of the ok samples

    def add(self, done: Finished) -> None:
        self.samples.append(done.row)
        self.media.extend(done.media)
        if done.record is not None:
            self.records.append((done.row.line, done.record))
