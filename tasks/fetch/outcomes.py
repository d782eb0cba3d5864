"""What the fetch stage answers for each reference, and the counts of a batch.

A failed reference is an outcome with a failure class (:mod:`.failures`), never an exception: its row goes
to the media manifest (:func:`outcome_columns`) and a later run retries it. :func:`final_failure` picks the
one failure reported when every recipe source failed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ...schemas.reasons import reason
from ...schemas.redact import redact_url
from ..http import NO_SOURCE, TRANSIENT, UNSAFE_MEMBER, FetchError


@dataclass(frozen=True, slots=True)
class LocalLocation:
    """Where a ``local`` / ``release_tar`` object lives: a file, or a byte range of a release tar."""

    path: str
    offset: int | None = None
    size: int | None = None


class HeldBytes:
    """An object's bytes still in memory when its outcome is announced, handed over once (:meth:`take`),
    so the media step does not read back from the store what the fetch stage has just written or
    verified. Taking them drops them and gives their bytes back to the batch's :class:`HeldPool`."""

    __slots__ = ("_data", "_pool")

    def __init__(self, data: bytes, pool: HeldPool) -> None:
        self._data: bytes | None = data
        self._pool = pool

    def take(self) -> bytes | None:
        data, self._data = self._data, None
        if data is not None:
            self._pool.release(len(data))
        return data


class HeldPool:
    """How many bytes a batch's outcomes may hold in memory at once. The fetch threads run ahead of the
    media step (a whole batch can be fetched before its first image is decoded), so holding every object
    would make a batch's memory its media's size; past ``limit`` an outcome holds nothing and the media
    step reads the object from the store (from the page cache, as it was just written)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0
        self._lock = threading.Lock()

    def hold(self, data: bytes) -> HeldBytes | None:
        with self._lock:
            if self.held + len(data) > self.limit:
                return None
            self.held += len(data)
        return HeldBytes(data, self)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What happened to one reference. ``status`` is ``ok`` or a failure class."""

    ref: str
    status: str
    source: str | None = None  # kind of the recipe source that answered (or failed last)
    upstream: str | None = None  # URL, s3://..., hf://..., archive URL#member, local path, tar#member
    sha256: str | None = None  # object in the store (remote sources)
    nbytes: int | None = None
    detail: str | None = None
    attempts: int = 0
    cached: bool = False  # answered by the store's upstream index: nothing was fetched
    location: LocalLocation | None = None  # local sources: read in place
    held: HeldBytes | None = field(default=None, compare=False, repr=False)  # the object, taken once

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT

    def reason(self) -> str:
        """Readable reject reason (``<class>: <detail>``) for the media manifest (``ok`` when ok)."""
        return self.status if self.ok else reason(self.status, self.detail)

    def for_ref(self, ref: str) -> FetchOutcome:
        """The same answer for another reference naming the same object."""
        return replace(self, ref=ref)


Answer = FetchOutcome | FetchError  # what a source says about one reference
Answers = dict[str, Answer]  # reference -> answer
Located = dict[str, dict[str, str]]  # reference -> its template variables ({ref}, {name}, match groups...)


@dataclass
class FetchStats:
    """Counts of one fetch call; ``+`` merges batches (datatrove-style)."""

    refs: int = 0
    ok: int = 0
    cached: int = 0  # ok from the upstream index
    local: int = 0  # ok from release_tar / local sources
    fetched: int = 0  # ok and transferred now
    failed: int = 0
    bytes_fetched: int = 0  # transferred over the network (bodies, ranges, central directories, streams)
    bytes_stored: int = 0  # new objects' bytes
    seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: FetchStats) -> FetchStats:
        out = FetchStats()
        for f in fields(self):
            if f.name == "failures":
                merged = dict(self.failures)
                for k, v in other.failures.items():
                    merged[k] = merged.get(k, 0) + v
                out.failures = merged
            else:
                setattr(out, f.name, getattr(self, f.name) + getattr(other, f.name))
        return out

    def count(self, outcome: FetchOutcome) -> None:
        """Add one final outcome to the reference counts."""
        self.refs += 1
        if not outcome.ok:
            self.failed += 1
            self.failures[outcome.status] = self.failures.get(outcome.status, 0) + 1
        else:
            self.ok += 1
            if outcome.cached:
                self.cached += 1
            elif outcome.location is not None:  # read in place (release_tar, local)
                self.local += 1
            else:
                self.fetched += 1

    @property
    def files_per_s(self) -> float:
        return self.fetched / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        return (
            f"{self.refs} refs: {self.ok} ok ({self.fetched} fetched, {self.cached} cached, "
            f"{self.local} local), "
            f"{self.failed} failed ({failures}); {self.bytes_fetched / 1e6:.1f} MB in {self.seconds:.1f} s, "
            f"{self.files_per_s:.0f} files/s"
        )


@dataclass
class FetchResult:
    outcomes: dict[str, FetchOutcome]
    stats: FetchStats


FAILED_REFS_SQL = (
    "SELECT subset, ref, upstream, fetch_status, fetch_detail FROM media "
    "WHERE fetch_status IS NOT NULL AND fetch_status <> 'ok' ORDER BY subset, ref"
)


def outcome_columns(outcome: FetchOutcome) -> dict[str, Any]:
    """The :data:`MEDIA_FETCH_FIELDS` values of one outcome (deterministic: no timings or cache flags)."""
    # through redact: a value taken from the environment (recipe_env.py) is written as its ${NAME}
    return {
        "upstream": redact_url(outcome.upstream),
        "fetch_status": outcome.status,
        "fetch_detail": redact_url(outcome.detail),
    }


def final_failure(ref: str, errors: list[tuple[str, FetchError]]) -> FetchOutcome:
    """One outcome from every source's failure; the detail lists them all.

    An unsafe member (link, escape) is a verdict on the reference itself: it wins over other sources'
    failures; then a transient failure (a later run retries it); else the first source's."""
    if not errors:
        return FetchOutcome(ref, NO_SOURCE, detail="no recipe source applies to this reference")
    kind, chosen = next(
        ((k, e) for k, e in errors if e.failure == UNSAFE_MEMBER),
        next(((k, e) for k, e in errors if e.transient), errors[0]),
    )
    detail = chosen.detail
    if chosen.url and chosen.url not in detail:
        detail = f"{detail} ({chosen.url})"
    if len(errors) > 1:
        others = "; ".join(f"{k}: {e.failure}" for k, e in errors if e is not chosen)
        detail = f"{detail}; also tried {others}"
    return FetchOutcome(ref, chosen.failure, kind, chosen.url, detail=detail[:1000], attempts=chosen.attempts)
