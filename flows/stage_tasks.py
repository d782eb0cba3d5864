"""The Prefect tasks a run submits to Ray: one thin wrapper per stage function of ``vlmforge.tasks``.

Each takes a group: several batches, or several subsets, worked one after another in one task. At the
release's shape (76 subsets, most of them small) a task of its own per subset and stage cost more than the
work (~0.5 CPU-s of Prefect task engine, API calls and Ray dispatch each), so the flow groups what is ready
at once (:mod:`.pipeline`). One subset's failure in a group is its own result, never the group's.

Each names its task runs for the Prefect UI, sets its retries, and hands back what it freed when it ends
(:func:`~.runtime.returns_freed_memory`): a Ray worker runs one task after another for the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from prefect import get_run_logger, task

from ..schemas.records import SubsetEntry
from ..schemas.stage_options import BatchWork, GateWork, PublishWork
from ..tasks.batch import BatchStats, build_batch
from ..tasks.gate import GateResult, gate_subset, gate_subsets, load_overrides, record_gate
from ..tasks.manifests import OutputLayout
from ..tasks.publish import (
    EmptyTrainSplitError,
    PublishResult,
    ShardsGateFailed,
    publish_subset,
    shards_check,
)
from ..tasks.storage import OutputFullError
from ..tasks.validate import validate_subset
from .runtime.embedded import returns_freed_memory
from .summary import publish_quality

T = TypeVar("T")
U = TypeVar("U")
RETRY_DELAY_S = 5
BATCH_RETRIES = 2

__all__ = [
    "SubsetFailure",
    "build_batch_task",
    "gate_task",
    "group_label",
    "publish_task",
    "quality_docs_task",
    "validate_task",
]


# A retry would fail the same way: full output volume, nothing to train on, a failed shards suite.
_FINAL = (OutputFullError, EmptyTrainSplitError, ShardsGateFailed)


def _not_disk_full(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed batch or publish unless a retry would fail the same way (output volume full, nothing
    left to train on)."""
    try:
        state.result()
    except _FINAL:
        return False
    except Exception:  # noqa: BLE001 - any other failure is worth a retry
        return True
    return True


@dataclass(frozen=True)
class SubsetFailure:
    """One subset's stage raised inside a group task: the other subsets of the task go on."""

    error: str  # the exception's type
    detail: str  # its message
    shards_gate: bool = False  # the staged dataset failed the ``shards`` suite (a gate verdict, not an error)

    @classmethod
    def of(cls, exc: BaseException) -> SubsetFailure:
        return cls(type(exc).__name__, str(exc), isinstance(exc, ShardsGateFailed))

    @property
    def message(self) -> str:
        """``<type>: <message>``, as the run's summary shows an error."""
        return f"{self.error}: {self.detail}"


def group_label(items: Sequence[str], shown: int = 4) -> str:
    """A group task's name for the Prefect UI: its first ``shown`` items and how many more."""
    more = f" +{len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _each(
    items: Sequence[U], work: Callable[[U], T], *, retries: int = 0, raising: tuple[type[Exception], ...] = ()
) -> list[T | SubsetFailure]:
    """``work`` for each item in turn, one item's exception kept as its :class:`SubsetFailure` (those in
    ``raising`` end the task); a failure is tried again ``retries`` times unless it is final."""
    out: list[T | SubsetFailure] = []
    for item in items:
        for attempt in range(retries + 1):
            try:
                out.append(work(item))
                break
            except raising:
                raise
            except _FINAL as exc:
                out.append(SubsetFailure.of(exc))
                break
            except Exception as exc:  # noqa: BLE001 - one item's failure must not stop the others
                if attempt == retries:
                    out.append(SubsetFailure.of(exc))
                else:
                    time.sleep(RETRY_DELAY_S)
    return out


@task(
    name="build-batch",
    retry_condition_fn=_not_disk_full,
    task_run_name="build {label}",
    retries=2,
    retry_delay_seconds=RETRY_DELAY_S,
)
@returns_freed_memory
def build_batch_task(
    units: list[tuple[SubsetEntry, int]], work: BatchWork, host_share: int = 1, label: str = ""
) -> list[BatchStats | str]:
    """Batches, one after another (small subsets' batches share a task: a task costs more than their
    work). A batch's failure is its error text; a full output volume stops the task (no batch can succeed).
    A retried task skips the batches it committed (they are current)."""
    done = _each(
        units,
        lambda unit: build_batch(unit[0], unit[1], work, host_share=host_share),
        retries=BATCH_RETRIES,
        raising=(OutputFullError,),
    )
    return [r if isinstance(r, BatchStats) else f"batch failed: {r.message}" for r in done]


@task(name="gate", task_run_name="gate {label}")
@returns_freed_memory
def gate_task(
    work: GateWork, entries: list[SubsetEntry], run_id: str, label: str = ""
) -> list[GateResult | SubsetFailure]:
    """The gate of each subset of the group, in one process (one Great Expectations context), the
    subsets' validations shared (:func:`~..tasks.gate.gate_subsets`)."""
    overrides = load_overrides(work.gate.gate_overrides)
    layout = OutputLayout(work.out)
    by_name = {e.subset: e for e in entries}

    def gate(subset: str) -> GateResult:
        result = gate_subset(work, by_name[subset], run_id=run_id, overrides=overrides)
        return record(result)

    def record(result: GateResult) -> GateResult:
        record_gate(layout, run_id, result)
        return result

    try:
        results = gate_subsets(work, list(by_name.values()), run_id=run_id, overrides=overrides)
    except Exception:  # noqa: BLE001 - e.g. a subset's unreadable manifests: each alone, so it fails alone
        return _each(list(by_name), gate)
    return _each(results, record)


@task(
    name="publish",
    task_run_name="publish {label}",
    retries=1,
    retry_delay_seconds=RETRY_DELAY_S,
    retry_condition_fn=_not_disk_full,
)
@returns_freed_memory
def publish_task(
    work: PublishWork, subsets: list[str], run_id: str, label: str = ""
) -> list[PublishResult | SubsetFailure]:
    """Each subset of the group published in turn; a failed publish is tried once more."""
    layout = OutputLayout(work.out)

    def publish(subset: str) -> PublishResult:
        # The shards suite checks the staged dataset before the swap (skipped with the rest of the gate).
        check = None if work.gate.skip_gate else shards_check(layout, subset, run_id=run_id)
        return publish_subset(
            layout,
            subset,
            shard_max_bytes=work.shards.shard_max_bytes,
            shard_max_samples=work.shards.shard_max_samples,
            sample_format=work.shards.sample_format,
            store=work.store,
            check=check,
        )

    return _each(subsets, publish, retries=1)


@task(name="quality-docs", task_run_name="quality docs")
@returns_freed_memory
def quality_docs_task(out: str, run_id: str, served_url: str | None = None) -> str:
    """The run's Data Docs and their Markdown, on a worker that has Great Expectations imported already (the
    gate's): in the driver, importing it added ~5 s and ~0.2 GB to every run's end. ``served_url``: the
    report's http URL when a ``vlmforge server --docs`` serves the output folder."""
    return publish_quality(OutputLayout(out), run_id, get_run_logger(), served_url)


@task(name="validate", task_run_name="validate {label}")
@returns_freed_memory
def validate_task(out: str, subsets: list[str], label: str = "") -> list[str | SubsetFailure]:
    """Read each published dataset back through megatron-energon and the cooker (a sample of each split)."""

    def validate(subset: str) -> str:
        report = validate_subset(out, subset, sample_limit=64)
        return "ok" if report.ok else "failed: " + "; ".join(report.problems[:5])

    return _each(subsets, validate)
