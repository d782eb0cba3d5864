"""How a run groups its work into tasks: small subsets' batches packed into one task, and the gates,
publishes and read-backs of the subsets that are ready at the same time in one task each.

A Prefect task on Ray costs ~0.5 CPU-s whatever its work (task engine, API calls, Ray's dispatch). At the
release's shape (76 subsets, most of a few hundred rows) one task per batch and per subset and stage was more
than half of the run (76 text-only subsets of 20 rows: 206 s against 23 s for the same rows in one subset).
Grouping is decided here, with no Prefect or Ray in it; :mod:`.pipeline` submits the groups.

- :func:`pack_batches`: consecutive batches share a task while their lines stay within a budget that still
  leaves every core work to the end (a share of the run's lines per slot of the window, at most
  ``batch_lines``). A subset's own batches are sized by the catalog, so a large subset's batches stay one
  task each; a task's batches run one after another, so memory stays that of one batch.
- :class:`StageQueues`: a subset whose batches are done queues for its next stage; a stage keeps at most
  ``slots`` tasks in flight and, when one is free, takes every subset queued for it (up to
  :data:`MAX_GROUP`) as one task. What becomes ready while a task of the stage runs rides in the next one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Generic, TypeVar

from ..schemas.records import SubsetEntry
from ..tasks.batch import batch_lines_of

MAX_GROUP = 32  # subsets in one stage task at most: a bound on a task's name, run time and lost work
Unit = tuple[SubsetEntry, int]  # (subset, batch index)
E = TypeVar("E")


def batch_line_count(entry: SubsetEntry, index: int, batch_lines: int) -> int:
    """Lines of batch ``index`` of ``entry`` (the batch stage's own :func:`batch_lines_of`; the last
    batch of an entry without a plan ends at its last row)."""
    first, last = batch_lines_of(entry, index, batch_lines)
    return max(0, min(last, entry.rows) - first + 1)


def pack_batches(units: Sequence[Unit], batch_lines: int, window: int) -> list[list[Unit]]:
    """``units`` in order, consecutive ones packed into one task while their lines stay within
    ``min(batch_lines, ceil(lines / (2 * window)))``: at least twice as many tasks as the window keeps in
    flight, so packing never idles a core. A batch over the budget is a task of its own."""
    sizes = [batch_line_count(e, i, batch_lines) for e, i in units]
    budget = max(1, min(batch_lines, math.ceil(sum(sizes) / (2 * max(1, window)))))
    packs: list[list[Unit]] = []
    lines = 0
    for unit, size in zip(units, sizes, strict=True):
        if packs and lines + size <= budget:
            packs[-1].append(unit)
            lines += size
        else:
            packs.append([unit])
            lines = size
    return packs


class StageQueues(Generic[E]):
    """Per stage, the subsets waiting for it and the stage's tasks in flight (see the module docstring)."""

    def __init__(self, stages: Sequence[str], slots: int) -> None:
        self.slots = max(1, slots)
        self.waiting: dict[str, list[E]] = {s: [] for s in stages}
        self.running: dict[str, int] = dict.fromkeys(stages, 0)

    def add(self, stage: str, item: E) -> None:
        self.waiting[stage].append(item)

    def take(self) -> list[tuple[str, list[E]]]:
        """The groups to submit now, each (stage, items), counted as in flight."""
        groups = []
        for stage, waiting in self.waiting.items():
            while waiting and self.running[stage] < self.slots:
                group, self.waiting[stage] = waiting[:MAX_GROUP], waiting[MAX_GROUP:]
                waiting = self.waiting[stage]
                self.running[stage] += 1
                groups.append((stage, group))
        return groups

    def done(self, stage: str) -> None:
        """A task of ``stage`` finished: its slot is free."""
        self.running[stage] -= 1
