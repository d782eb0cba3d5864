"""The Prefect tasks a run submits to Ray: one thin wrapper per stage function of ``vlmforge.tasks``.

Each names its task runs for the Prefect UI, sets its retries, and hands back what it freed when it ends
(:func:`~.runtime.returns_freed_memory`): a Ray worker runs one task after another for the whole run.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task

from ..schemas.config import RunConfig
from ..schemas.records import SubsetEntry
from ..tasks.batch import BatchStats, build_batch
from ..tasks.gate import GateResult, gate_subset, load_overrides, record_gate
from ..tasks.manifests import OutputLayout
from ..tasks.publish import EmptyTrainSplitError, PublishResult, publish_subset, shards_check, validate_subset
from ..tasks.storage import OutputFullError
from .runtime import returns_freed_memory
from .summary import publish_quality

__all__ = ["build_batch_task", "gate_task", "publish_task", "quality_docs_task", "validate_task"]


def _not_disk_full(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed batch or publish unless a retry would fail the same way (output volume full, nothing
    left to train on)."""
    try:
        state.result()
    except (OutputFullError, EmptyTrainSplitError):
        return False
    except Exception:  # noqa: BLE001 - any other failure is worth a retry
        return True
    return True


@task(
    name="build-batch",
    retry_condition_fn=_not_disk_full,
    task_run_name="build {entry.subset} batch {index}/{n_batches}",
    retries=2,
    retry_delay_seconds=5,
)
@returns_freed_memory
def build_batch_task(
    entry: SubsetEntry, index: int, n_batches: int, cfg: RunConfig, host_share: int = 1
) -> BatchStats:
    return build_batch(entry, index, cfg, host_share=host_share)


@task(name="gate", task_run_name="gate {entry.subset}")
@returns_freed_memory
def gate_task(cfg: RunConfig, entry: SubsetEntry, run_id: str) -> GateResult:
    result = gate_subset(cfg, entry, run_id=run_id, overrides=load_overrides(cfg.gate.gate_overrides))
    record_gate(OutputLayout(cfg.out), run_id, result)
    return result


@task(
    name="publish",
    task_run_name="publish {subset}",
    retries=1,
    retry_delay_seconds=5,
    retry_condition_fn=_not_disk_full,
)
@returns_freed_memory
def publish_task(cfg: RunConfig, subset: str, run_id: str) -> PublishResult:
    layout = OutputLayout(cfg.out)
    # The shards suite checks the staged dataset before the swap (skipped with the rest of the gate).
    check = None if cfg.gate.skip_gate else shards_check(layout, subset, run_id=run_id)
    return publish_subset(
        layout,
        subset,
        shard_max_bytes=cfg.shards.shard_max_bytes,
        shard_max_samples=cfg.shards.shard_max_samples,
        sample_format=cfg.shards.sample_format,
        store=cfg.store_url,
        check=check,
    )


@task(name="quality-docs", task_run_name="quality docs")
@returns_freed_memory
def quality_docs_task(out: str, run_id: str, served_url: str | None = None) -> str:
    """The run's Data Docs and their Markdown, on a worker that has Great Expectations imported already (the
    gate's): in the driver, importing it added ~5 s and ~0.2 GB to every run's end. ``served_url``: the
    report's http URL when a ``vlmforge server --docs`` serves the output folder."""
    return publish_quality(OutputLayout(out), run_id, get_run_logger(), served_url)


@task(name="validate", task_run_name="validate {subset}")
@returns_freed_memory
def validate_task(out: str, subset: str) -> str:
    """Read the published dataset back through megatron-energon and the cooker (a sample of each split)."""
    report = validate_subset(out, subset, sample_limit=64)
    return "ok" if report.ok else "failed: " + "; ".join(report.problems[:5])
