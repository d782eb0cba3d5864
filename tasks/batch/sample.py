"""One line of the batch through its steps: parsed -> record knobs -> media -> tokens -> token knobs -> key.

Each step either hands the sample on or ends it with a reason, through the one function :func:`stop`, whose
status (rejected or dropped) is the reason's registry entry. Every line ends as exactly one samples row, plus
the media rows of the references it got to, plus its shard record when ok.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...schemas.config import TokenOptions
from ...schemas.reasons import REASONS, code_of, reason
from ...schemas.records import Record, Reject
from ...schemas.rows import MediaRow, SampleRow
from ...schemas.sample_keys import sanitize_key, split_for_key
from .knobs import n_images, record_drop, token_drop
from .media_step import MediaStep
from .shard_record import shard_record
from .stats import StageClock
from .tokens_step import CountedSample, TokenStep


@dataclass
class Finished:
    """A line's rows: its samples row, its media rows, and its shard record (ok samples only)."""

    row: SampleRow
    media: list[MediaRow] = field(default_factory=list)
    record: str | None = None


def stop(row: SampleRow, why: str, media: list[MediaRow] | None = None) -> Finished:
    """End a sample with reason ``why``: rejected or dropped as its code's registry entry says."""
    row.status, row.reason = REASONS[code_of(why)].status, why
    return Finished(row, media or [])


class SampleSteps:
    """The per-sample steps of one batch (holding the keys its samples took)."""

    def __init__(
        self,
        subset: str,
        knobs: TokenOptions,
        val_fraction: float,
        media: MediaStep,
        tokens: TokenStep,
        clock: StageClock,
    ) -> None:
        self.subset, self.knobs, self.val_fraction = subset, knobs, val_fraction
        self.media, self.tokens, self.clock = media, tokens, clock
        self.keys: dict[str, int] = {}  # sample key -> the line that took it

    def run(self, item: Record | Reject) -> Finished:
        if isinstance(item, Reject):
            return stop(SampleRow(subset=self.subset, line=item.line, sample_id=item.sample_id), item.reason)
        images = n_images(item)
        row = SampleRow(
            subset=self.subset,
            line=item.line,
            sample_id=item.sample_id,
            n_images=images,
            n_videos=len(item.media) - images,
            id_conflict_of=item.id_conflict_of,
        )
        if drop := record_drop(item, self.knobs):
            return stop(row, drop)

        with self.clock.timed("media"):
            media = self.media.for_sample(item)
        if media.failure:
            return stop(row, media.failure, media.rows)

        with self.clock.timed("tokens"):
            try:
                counted = self.tokens.count(item, media)
            except ValueError as exc:  # e.g. a video too short for the model's temporal patch
                return stop(row, reason("token_count_error", str(exc)), media.rows)
            _set_tokens(row, counted)
            if drop := token_drop(counted, self.knobs):
                return stop(row, drop, media.rows)
            _set_fit(row, counted)

        key = item.key or sanitize_key(self.subset, item.sample_id)
        if key in self.keys:
            return stop(
                row, reason("duplicate_key", f"{key} already used by line {self.keys[key]}"), media.rows
            )
        self.keys[key] = item.line
        row.key, row.split = key, split_for_key(key, self.val_fraction)
        return Finished(row, media.rows, shard_record(item, row, media.rows))


def _set_tokens(row: SampleRow, counted: CountedSample) -> None:
    """The fed counts (what the trainer's batch path feeds), and the visual tokens its check counted."""
    tokens = counted.fed
    row.text_tokens, row.visual_tokens, row.total_tokens = (
        tokens.text_tokens,
        tokens.visual_tokens,
        tokens.total_tokens,
    )
    row.encode_check_visual_tokens = counted.tokens.visual_tokens


def _set_fit(row: SampleRow, counted: CountedSample) -> None:
    """A sample cut to fit ``--seq-len`` (truncate mode) records the counts as written."""
    fit = counted.fit
    if fit.truncated_tokens:
        row.text_tokens, row.total_tokens, row.truncated_tokens = (
            fit.text_tokens,
            fit.total_tokens,
            fit.truncated_tokens,
        )
