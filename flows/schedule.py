"""What a run does next, subset by subset: the follow-up stages of a subset start as soon as its own batches
are done, overlapped with other subsets' remaining batches (never after all batches of the run).

:class:`SubsetSchedule` is the state of that decision, with no Prefect or Ray in it: the flow tells it what
finished (:meth:`batch_done`, :meth:`gate_done`, :meth:`publish_done`) and submits the stages it answers
with. Every step is recorded in :attr:`events`, in order, which the run record keeps.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..tasks.batch import BatchStats
from ..tasks.ops import RUN_WIDE, StageTime

GATE, PUBLISH, VALIDATE = "gate", "publish", "validate"
UNITS = {"batches": "rows", GATE: "subsets", PUBLISH: "subsets", VALIDATE: "subsets"}


@dataclass
class SubsetProgress:
    """One subset's batches so far: how many are left, their merged stats, or the first error."""

    remaining: int
    stats: BatchStats = field(default_factory=BatchStats)
    error: str | None = None


class SubsetSchedule:
    """Counts each subset's outstanding batches and says which stage of which subset starts next."""

    def __init__(self, batches: Iterable[tuple[str, int]], *, skip_gate: bool) -> None:
        self.skip_gate = skip_gate
        self.subsets: dict[str, SubsetProgress] = {s: SubsetProgress(n) for s, n in batches}
        self.events: list[str] = []

    def _event(self, what: str, subset: str) -> None:
        self.events.append(f"{what} {subset}")

    def ready_now(self) -> list[str]:
        """Subsets with no batch at all (an empty JSONL): their follow-ups start at once."""
        return [s for s, p in self.subsets.items() if p.remaining == 0]

    def batch_done(self, subset: str, result: BatchStats | str) -> bool:
        """One batch of ``subset`` finished with ``result`` (its stats or an error); True when it was the
        subset's last (then :meth:`batches_finished` says where the subset goes)."""
        p = self.subsets[subset]
        p.remaining -= 1
        if isinstance(result, str):
            p.error = p.error or result
        else:
            p.stats = p.stats + result
        return p.remaining == 0

    def batches_finished(self, subset: str) -> str | None:
        """``subset`` has no batch left: the stage it goes to (None when a batch failed)."""
        self._event("batches done", subset)
        if self.subsets[subset].error is not None:
            return None
        return self._next(subset, PUBLISH if self.skip_gate else GATE)

    def unchanged(self, subset: str, validated: bool) -> str | None:
        """``subset``'s batches were all current and it is as at its last publish: no stage follows, but
        the read-back when that publish was never read back (its run was stopped in between)."""
        self._event("batches done", subset)
        self._event("unchanged", subset)
        return None if validated else self._next(subset, VALIDATE)

    def gate_done(self, subset: str, passed: bool) -> str | None:
        """The gate of ``subset`` ended: ``publish`` when it passed, else None."""
        self._event("gate done", subset)
        return self._next(subset, PUBLISH) if passed else None

    def publish_done(self, subset: str, published: bool) -> str | None:
        """The publish of ``subset`` ended: ``validate`` when it published, else None."""
        self._event("publish done", subset)
        return self._next(subset, VALIDATE) if published else None

    def validate_done(self, subset: str) -> None:
        self._event("validate done", subset)

    def _next(self, subset: str, stage: str) -> str | None:
        if stage == PUBLISH and self.subsets[subset].stats.ok == 0:
            return None  # nothing to publish: no ok samples
        self._event(f"{stage} started", subset)
        return stage


class StageSpans:
    """Per kind of task, when the first was submitted and the last finished, and how many units: the run's
    stage times (the stages overlap, so each spans its first start to its last end)."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def started(self, kind: str) -> bool:
        """Note a submission of ``kind``; True for the first one."""
        first = kind not in self.first
        self.first.setdefault(kind, time.perf_counter())
        return first

    def finished(self, kind: str, units: int = 1) -> None:
        self.last[kind] = time.perf_counter()
        self.count[kind] = self.count.get(kind, 0) + units

    def times(self) -> list[StageTime]:
        return [
            StageTime(RUN_WIDE, kind, self.last.get(kind, t0) - t0, self.count.get(kind, 0), UNITS[kind])
            for kind, t0 in self.first.items()
        ]
