"""The unit of work: one batch (a range of JSONL lines of a subset) from its bytes to its committed manifest
parts. Parse -> media -> tokens -> knobs -> write, each step a module of this package.

A batch is the unit Prefect and Ray see. It is skipped when its committed samples part carries the current
fingerprint (``write.py``); otherwise every line becomes one samples row (rows in = ok + rejected + dropped),
its references media rows, and each ok sample a shard record.
"""

from __future__ import annotations

from ...schemas.records import Record, Reject, SubsetEntry
from ...schemas.stage_options import BatchWork
from ..geometry import geometry_of
from ..manifests import OutputLayout
from ..parse import parse_batch
from ..storage import ContentStore, url_to_fs
from .knobs import record_drop
from .media_step import MediaStep
from .sample import SampleSteps
from .stats import BatchStats, StageClock
from .tokens_step import TokenStep, get_tokenizer
from .write import RETRY_SUFFIX, BatchParts, batch_fingerprint, batch_is_current, write_batch


def build_batch(
    entry: SubsetEntry, index: int, work: BatchWork, *, force: bool = False, host_share: int = 1
) -> BatchStats:
    """Process batch ``index`` of ``entry`` and commit its manifest parts; skip it when already current.
    ``host_share``: the batches fetching at once across the run, which split the per-host limits."""
    layout = OutputLayout(work.out)
    if not force and (committed := batch_is_current(layout, entry, index, work)) is not None:
        return committed
    clock = StageClock()
    with clock.timed("setup"):
        geometry = geometry_of(work.tokens, work.media)
        tokens = TokenStep(work.tokens, geometry, get_tokenizer(work.tokens))
        store = ContentStore(work.store, sync_later=True)  # synced once, before the batch is marked complete
        media = MediaStep(entry, work, geometry, store, host_share)
        data = _read_batch(entry, index)
    with clock.timed("parse"):
        items = _parse(data, entry, index, work)
    with clock.timed("media"):  # fetch the batch's objects, working the media of the kept samples meanwhile
        records = [it for it in items if isinstance(it, Record)]
        media.prefetch(records, wanted=[r for r in records if not record_drop(r, work.tokens)])

    steps = SampleSteps(entry.subset, work.tokens, work.batches.val_fraction, media, tokens, clock)
    parts, stats = BatchParts(), BatchStats(batches=1)
    for item in items:
        finished = steps.run(item)
        parts.add(finished)
        stats.count(finished.row, finished.media)
    media.add_counts(stats)

    fingerprint = batch_fingerprint(entry, index, work)
    if media.transient_failures:  # recorded, but not current: the next run retries the batch
        fingerprint += RETRY_SUFFIX
    with clock.timed("write"):
        store.sync_pending()  # every object the parts name is on disk before the part that marks them
    write_batch(layout, entry, index, fingerprint, parts, stats, clock)
    return stats


def _read_batch(entry: SubsetEntry, index: int) -> bytes:
    """The batch's JSONL bytes: ``[offsets[index], offsets[index + 1])``."""
    fs, path = url_to_fs(entry.jsonl, **entry.storage_options)
    start, end = entry.batch_offsets[index], entry.batch_offsets[index + 1]
    with fs.open(path, "rb") as f:
        f.seek(start)
        return bytes(f.read(end - start))


def batch_lines_of(entry: SubsetEntry, index: int, batch_lines: int) -> tuple[int, int]:
    """The first and last line (1-based) of batch ``index``: from the catalog's plan, or, for an entry
    without one, every batch ``batch_lines`` long."""
    firsts = entry.batch_first_lines
    if not firsts:
        first = index * batch_lines + 1
        return first, first + batch_lines - 1
    last = firsts[index + 1] - 1 if index + 1 < len(firsts) else entry.rows
    return firsts[index], last


def _parse(data: bytes, entry: SubsetEntry, index: int, work: BatchWork) -> list[Record | Reject]:
    first_line, last_line = batch_lines_of(entry, index, work.batches.batch_lines)
    return parse_batch(
        data,
        first_line,
        allowed_schemes=work.media.allowed_url_schemes,
        duplicates=entry.duplicates_in(first_line, last_line),
        conflicts=entry.conflicts_in(first_line, last_line),
        subset=entry.subset,
    )
