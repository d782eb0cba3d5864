"""The counts of one batch (:class:`BatchStats`): committed in its samples part's metadata, merged with ``+``
(datatrove-style) into subset and run totals, and read back when a rerun skips a current batch.

Only the counts the batch's input decides are committed (:meth:`BatchStats.committed`): clock readings and
transfer figures depend on the attempt (a batch retried after a lost node finds in the store what its first
attempt fetched), and a rerun after a crash must write the same bytes. They reach the run's record from the
batch task's return value."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from ...schemas.rows import MediaRow, SampleRow


@dataclass
class BatchStats:
    """Counts of one batch; ``+`` merges them into subset and run totals."""

    lines: int = 0
    ok: int = 0
    rejected: int = 0
    dropped: int = 0
    images: int = 0
    videos: int = 0
    media_rejected: int = 0
    text_tokens: int = 0
    visual_tokens: int = 0
    out_bytes: int = 0
    truncated: int = 0  # ok samples whose text was cut to fit --seq-len (--seq-len-mode truncate)
    fetched: int = 0  # media objects transferred from upstream by this batch
    fetch_failed: int = 0  # references whose fetch failed (transient ones are retried by the next run)
    fetch_bytes: int = 0
    seconds: float = 0.0
    batches: int = 0
    skipped_batches: int = 0
    # Per-stage wall time inside the batches run (not skipped) by this run, for the ``runs`` table.
    setup_seconds: float = 0.0  # model preset, tokenizer, reading the batch's JSONL bytes
    parse_seconds: float = 0.0
    media_seconds: float = 0.0  # resolve / fetch, verify, resize, store
    tokens_seconds: float = 0.0  # token counts and knobs
    write_seconds: float = 0.0  # manifest parts
    media_refs: int = 0  # distinct references processed
    media_bytes: int = 0  # upstream bytes of those references

    def __add__(self, other: BatchStats) -> BatchStats:
        return BatchStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchStats:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def count(self, row: SampleRow, media: list[MediaRow]) -> None:
        """Count one finished sample by its status (every line of the batch passes here once)."""
        self.lines += 1
        self.truncated += 1 if row.truncated_tokens else 0
        if row.status == "ok":
            self.ok += 1
            self.images += row.n_images
            self.videos += row.n_videos
            self.text_tokens += row.text_tokens or 0
            self.visual_tokens += row.visual_tokens or 0
            self.out_bytes += sum(m.out_bytes or 0 for m in media)
        elif row.status == "rejected":
            self.rejected += 1
            self.media_rejected += sum(1 for m in media if m.status != "ok")
        else:
            self.dropped += 1

    def committed(self) -> dict[str, Any]:
        """The counts the batch's input decides, as its samples part records them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _ATTEMPT_ONLY}

    def as_done_earlier(self) -> BatchStats:
        """These committed stats as a skipped batch of a later run: work done by an earlier run is not this
        run's, so its times and transfer figures are zeroed (a part never records them)."""
        zeroed = {name: type(getattr(self, name))() for name in _ATTEMPT_ONLY}
        return BatchStats(**(vars(self) | zeroed | {"skipped_batches": 1}))


# What one attempt at a batch measured: this run's work, not the batch's outcome.
_ATTEMPT_ONLY = (
    "seconds",
    "fetched",
    "fetch_bytes",
    "setup_seconds",
    "parse_seconds",
    "media_seconds",
    "tokens_seconds",
    "write_seconds",
    "media_refs",
    "media_bytes",
)


class StageClock:
    """Wall time of a batch per stage (``setup``, ``parse``, ``media``, ``tokens``, ``write``), summed over
    every ``with clock.timed(stage):`` block, and since the clock was made."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started

    def into(self, stats: BatchStats) -> None:
        """The stage times and the batch's total time, into its stats."""
        for stage, seconds in self.seconds.items():
            setattr(stats, f"{stage}_seconds", seconds)
        stats.seconds = time.perf_counter() - self.started
