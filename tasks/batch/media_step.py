"""The batch's media step: one outcome row per media reference, each distinct reference worked once.

A reference's bytes come from the first of: the content store (a staged source layout, ``--format``, names
store objects ``store/<sha256>/<name>``); the fetch stage (a media recipe naming remote sources answers every
reference, fetched into the store before or while the batch decodes); the release itself (media roots, the
subset folder, its media tars). The bytes are then verified, normalised and stored (``normalise.py``). A
failure is a rejected media row and the reason of the sample that uses the reference, never an exception.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ...schemas.reasons import reason
from ...schemas.records import MediaRef, Record, SubsetEntry
from ...schemas.rows import MediaRow
from ...schemas.stage_options import BatchWork
from ..catalog import find_recipe
from ..fetch import (
    FetchContext,
    FetchKnobs,
    FetchOutcome,
    FetchStats,
    FetchStream,
    MediaResolver,
    MissingMedia,
    outcome_columns,
    read_outcome,
)
from ..geometry import ModelGeometry, VideoSpec
from ..staging import is_store_ref, read_store_ref
from ..storage import ContentStore, sha256_bytes
from .normalise import MediaOutcome, Normaliser, rejected
from .stats import BatchStats


@dataclass
class SampleMedia:
    """A sample's media rows (in part order), why the sample fails (the first failing reference), and
    what token counting needs: the stored (height, width) of each image, the sampled frames of each video."""

    rows: list[MediaRow]
    failure: str | None
    image_sizes: list[tuple[int, int]]
    videos: list[VideoSpec]


@dataclass
class _Bytes:
    data: bytes
    sha256: str | None = None  # known already (a stored object is named by its hash): not hashed again


class MediaStep:
    """Resolves, verifies, normalises and stores the media of one batch (outcomes cached per reference)."""

    def __init__(
        self,
        entry: SubsetEntry,
        work: BatchWork,
        geometry: ModelGeometry,
        store: ContentStore,
        host_share: int = 1,
    ) -> None:
        self.entry, self.store, self.host_share = entry, store, host_share
        self.fetch_options, self.media_options = work.fetch, work.media
        self.normalise = Normaliser(work, geometry, store)
        timeout = work.fetch.fetch_batch_timeout  # the batch deadline also bounds indexing the media tars
        self.resolver = MediaResolver(
            entry.path,
            entry.media_tars,
            work.media.media_roots,
            storage_options=entry.storage_options,
            deadline=None if timeout is None else time.monotonic() + timeout,
        )
        # With a media recipe that names a source beyond the release's own media (remote or a local folder),
        # the fetch stage answers every reference.
        recipe = find_recipe(entry.subset, work.media.catalogs)
        self.recipe = recipe if recipe is not None and recipe.fetches else None
        self.fetched: dict[str, FetchOutcome] = {}
        self.fetch_stats = FetchStats()
        self.staged = work.staged
        self._cache: dict[tuple[str, str], MediaOutcome] = {}

    def prefetch(self, records: list[Record], wanted: list[Record]) -> None:
        """Fetch the references of ``records`` (each distinct upstream object once, into the store), and
        process the media of ``wanted`` as their objects arrive: this thread decodes while the fetch threads
        wait on the network, so a batch costs about the longer of the two rather than their sum."""
        refs = sorted({m.ref for r in records for m in r.media})
        if self.recipe is None or not refs:
            return
        options = FetchKnobs.for_run(
            self.fetch_options, self.host_share, honour_robots_tag=not self.media_options.ignore_robots_tag
        )
        context = FetchContext(
            self.entry.path,
            self.entry.media_tars,
            self.media_options.media_roots,
            self.fetch_options.env_allow,
        )
        users: dict[str, list[tuple[MediaRef, Record]]] = {}
        for record in wanted:
            for m in record.media:
                users.setdefault(m.ref, []).append((m, record))
        stream = FetchStream(refs, self.recipe, self.store, context=context, options=options)
        for outcome in stream:
            self.fetched[outcome.ref] = outcome
            for m, record in users.get(outcome.ref, ()):
                self.process(m, record)
        result = stream.result()
        self.fetched = result.outcomes
        self.fetch_stats = result.stats

    def for_sample(self, record: Record) -> SampleMedia:
        """The sample's media rows, placed in the sample (a reference's outcome may be shared)."""
        outcomes = [self.process(m, record) for m in record.media]
        rows = [
            replace(o.row, sample_id=record.sample_id, line=record.line, index=m.index)
            for m, o in zip(record.media, outcomes, strict=True)
        ]
        return SampleMedia(
            rows=rows,
            failure=next((o.sample_reason for o in outcomes if not o.ok), None),
            image_sizes=[o.out_hw for o in outcomes if o.out_hw is not None],
            videos=[o.video for o in outcomes if o.video is not None],
        )

    def process(self, ref: MediaRef, record: Record) -> MediaOutcome:
        """The outcome of one reference, worked the first time a sample (``record``) asks for it."""
        key = (ref.kind, ref.ref)
        if key not in self._cache:
            row = MediaRow(
                subset=self.entry.subset,
                sample_id=record.sample_id,
                line=record.line,
                index=ref.index,
                ref=ref.ref,
                kind=ref.kind,
            )
            self._cache[key] = self._work(row)
        return self._cache[key]

    def _work(self, row: MediaRow) -> MediaOutcome:
        got = self._acquire(row)
        if isinstance(got, MediaOutcome):
            return got
        row.sha256, row.bytes = got.sha256 or sha256_bytes(got.data), len(got.data)
        return self.normalise(row, got.data)

    def _acquire(self, row: MediaRow) -> _Bytes | MediaOutcome:
        """The reference's upstream bytes, or its rejected outcome (the order: see the module docstring)."""
        if self.staged:
            data = read_store_ref(self.store, row.ref)
            if data is not None:
                row.source = "store"
                return _Bytes(data)
            if is_store_ref(row.ref):
                why = reason("missing_media", "not in the content store (rerun to restage)")
                return rejected(row, why, reason("missing_media", row.ref))
        fetched = self.fetched.get(row.ref)
        if fetched is not None:
            for column, value in outcome_columns(fetched).items():
                setattr(row, column, value)
            row.source = fetched.source
            if not fetched.ok:
                why = reason("fetch_failed", fetched.reason())
                return rejected(row, why, reason("fetch_failed", f"{row.ref}: {fetched.status}"))
            return _Bytes(
                read_outcome(fetched, self.store), fetched.sha256 if fetched.location is None else None
            )
        try:
            resolved = self.resolver.resolve(row.ref)
        except MissingMedia as exc:
            return rejected(row, *exc.reasons(row.ref))
        row.source = resolved.source
        return _Bytes(resolved.data)

    @property
    def transient_failures(self) -> int:
        return sum(1 for o in self.fetched.values() if o.transient)

    def add_counts(self, stats: BatchStats) -> None:
        """The fetch figures and the distinct references worked, into the batch's stats."""
        stats.fetched = self.fetch_stats.fetched
        stats.fetch_failed = self.fetch_stats.failed
        stats.fetch_bytes = self.fetch_stats.bytes_fetched
        stats.media_refs = len(self._cache)
        stats.media_bytes = sum(o.row.bytes or 0 for o in self._cache.values())
