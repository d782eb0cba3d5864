"""The ``vlmforge run`` flow: catalog -> batches (parse, media, tokens) -> gate -> publish -> report.

Flows only wire, retry and report; the work is in ``vlmforge.tasks``. Batches fan out over Ray through
Prefect's RayTaskRunner in bounded waves, so the Prefect API sees hundreds of task runs, not millions.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from ..schemas.config import RunConfig
from ..schemas.records import SubsetEntry
from ..tasks.batch.batch import build_batch
from ..tasks.batch.stats import BatchStats
from ..tasks.catalog.layouts.stage import StagedRelease, stage_source
from ..tasks.catalog.recipe_fingerprints import recipe_fingerprint
from ..tasks.catalog.refresh import (
    catalog_columns,
    read_previous_catalog,
    split_by_license,
    write_subsets_row,
)
from ..tasks.catalog.release import catalog_release
from ..tasks.catalog.revision import release_revision
from ..tasks.errors import ReleaseError
from ..tasks.fetch.recipe_files import find_recipe
from ..tasks.gate.check import gate_subset
from ..tasks.gate.params import load_overrides
from ..tasks.gate.results import GateResult, record_gate, record_run
from ..tasks.gate.shards import ShardsGateFailed, shards_check
from ..tasks.manifests import OutputLayout, remove_parts_from
from ..tasks.ops.stats.stage_times import RUN_WIDE, StageTime, batch_stage_times, write_stage_times
from ..tasks.publish.publish import PublishResult, publish_metadataset, publish_subset
from ..tasks.publish.validate import validate_subset
from ..tasks.storage import ContentStore, OutputFullError, atomic_write_bytes
from . import progress
from .runtime import LoopbackRayTaskRunner
from .summary import RunSummary, SubsetOutcome, failures_markdown, publish_quality, summary_markdown


def _not_disk_full(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed batch or publish unless the output volume is full (a retry would fail the same way)."""
    try:
        state.result()
    except OutputFullError:
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
def build_batch_task(
    entry: SubsetEntry, index: int, n_batches: int, cfg: RunConfig, host_share: int = 1
) -> BatchStats:
    return build_batch(entry, index, cfg, host_share=host_share)


@task(name="gate", task_run_name="gate {entry.subset}")
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


@task(name="validate", task_run_name="validate {subset}")
def validate_task(out: str, subset: str) -> str:
    """Read the published dataset back through megatron-energon and the cooker (a sample of each split)."""
    report = validate_subset(out, subset, sample_limit=64)
    return "ok" if report.ok else "failed: " + "; ".join(report.problems[:5])


def _cluster_cpus(cfg: RunConfig) -> int:
    """CPUs of the Ray cluster (one batch runs per CPU), else the configured ones."""
    cpus = 0
    try:
        import ray

        if ray.is_initialized():
            cpus = int(ray.cluster_resources().get("CPU", 0))
    except Exception:  # noqa: BLE001 - sizing is best effort; the configured CPUs are the fallback
        cpus = 0
    return cpus or cfg.execution.num_cpus or 2


def _window(cpus: int) -> int:
    """Batches kept in flight: twice the cluster's CPUs, so every core stays busy while results drain and
    the Prefect API and Ray's scheduler see a bounded number of task runs, never one per row."""
    return max(2, 2 * cpus)


def _run_batches(entries: list[SubsetEntry], cfg: RunConfig) -> dict[str, BatchStats | str]:
    """Every batch of every subset through a sliding window (a finished batch makes room for the next, so
    one slow batch never idles the cluster); a subset's error is kept, not raised."""
    from prefect.futures import PrefectFuture, as_completed

    work = [(e, i) for e in entries for i in range(len(e.batch_offsets) - 1)]
    cpus = _cluster_cpus(cfg)
    window = _window(cpus)
    totals: dict[str, BatchStats | str] = {e.subset: BatchStats() for e in entries}
    progress.stage("batches", len(work))
    todo = iter(work)
    pending: dict[PrefectFuture[BatchStats], SubsetEntry] = {}

    def submit_next() -> None:
        for e, i in todo:
            # as many batches fetch at once as the cluster has CPUs: they split the per-host limits
            pending[build_batch_task.submit(e, i, len(e.batch_offsets) - 1, cfg, cpus)] = e
            return

    for _ in range(window):
        submit_next()
    while pending:
        fut = next(as_completed(list(pending)))
        e = pending.pop(fut)
        submit_next()
        progress.advance("batches")
        try:
            res = fut.result()
        except Exception as exc:  # noqa: BLE001 - one subset's failure must not stop the others
            if isinstance(exc, OutputFullError):  # no other batch can succeed either: stop, resume later
                raise
            totals[e.subset] = f"batch failed: {type(exc).__name__}: {exc}"
            continue
        prev = totals[e.subset]
        if isinstance(prev, BatchStats):
            totals[e.subset] = prev + res
    return totals


def _outcome_columns(o: SubsetOutcome, cfg: RunConfig) -> dict[str, Any]:
    return {
        "ok": o.stats.ok,
        "rejected": o.stats.rejected,
        "dropped": o.stats.dropped,
        "text_tokens": o.stats.text_tokens,
        "visual_tokens": o.stats.visual_tokens,
        "published": o.published,
        "gate": o.gate,
        "skip_gate": cfg.gate.skip_gate,
    }


def _catalog(cfg: RunConfig) -> list[SubsetEntry]:
    fingerprints = {}
    for subset in cfg.source.subsets:  # unnamed subsets get theirs below, once the catalog has listed them
        recipe = find_recipe(subset, cfg.media.catalogs)
        if recipe is not None:
            fingerprints[subset] = recipe_fingerprint(recipe)
    entries = catalog_release(
        cfg.source.release,
        subsets=cfg.source.subsets,
        batch_lines=cfg.batches.batch_lines,
        storage_options=cfg.source.storage_options,
        recipe_fingerprints=fingerprints or None,
    )
    if not cfg.source.subsets:
        entries = [_with_recipe_fingerprint(e, cfg) for e in entries]
    return entries


def _stage_source(cfg: RunConfig) -> tuple[RunConfig, StagedRelease | None]:
    """With ``--format`` other than nemotron: stage the source as a Nemotron-layout release under
    ``OUT/staging/<format>/`` (media into the store) and return the config the rest of the run uses."""
    if cfg.source.source_format == "nemotron":
        if cfg.source.source_configs:
            raise ReleaseError("--config selects configs of a staged source: give --format too")
        return cfg, None
    staged = stage_source(
        cfg.source.release,
        cfg.source.source_format,
        cfg.out,
        cfg.store_url,
        configs=cfg.source.source_configs,
        storage_options=cfg.source.storage_options,
    )
    unknown = sorted(set(cfg.source.subsets) - set(staged.subsets))
    if unknown:
        raise ReleaseError(
            f"subset(s) {', '.join(unknown)} not staged from {cfg.source.release!r}; "
            f"staged: {', '.join(staged.subsets)}"
        )
    work = cfg.replace(
        release=staged.root, storage_options={}, subsets=cfg.source.subsets or tuple(staged.subsets)
    )
    return work, staged


def _as_released(entries: list[SubsetEntry], cfg: RunConfig) -> list[SubsetEntry]:
    """Entries of a staged release name the source as given (release, revision), not the staging folder."""
    revision = release_revision(cfg.source.release)
    return [
        dataclasses.replace(e, release=cfg.source.release, revision=revision or e.revision) for e in entries
    ]


def _with_recipe_fingerprint(entry: SubsetEntry, cfg: RunConfig) -> SubsetEntry:
    recipe = find_recipe(entry.subset, cfg.media.catalogs)
    if recipe is None:
        return entry
    return dataclasses.replace(entry, media_recipe_sha256=recipe_fingerprint(recipe))


@flow(
    name="vlmforge-run",
    flow_run_name="run {cfg.source.release}",
    task_runner=LoopbackRayTaskRunner(),
    log_prints=True,
)
def run_release(cfg: RunConfig, run_id: str | None = None) -> RunSummary:
    """Turn the release ``cfg.source.release`` into manifests and Energon datasets under ``cfg.out``."""
    run = _Run.start(cfg, run_id)
    work, entries, previous = _catalog_stage(run, cfg)
    summary, to_gate = _batch_stage(run, work, entries)
    ready = _gate_stage(run, work, to_gate)
    _publish_stage(run, work, ready)
    _validate_stage(run, work, summary)
    _report(run, cfg, summary, entries, previous)
    return summary


@dataclass
class _Run:
    """What the steps of one run share: its id, output, clock and stage times."""

    run_id: str
    layout: OutputLayout
    logger: Any
    t0: float
    started_at: str
    times: list[StageTime] = field(default_factory=list)

    @classmethod
    def start(cls, cfg: RunConfig, run_id: str | None) -> _Run:
        run = cls(
            run_id=run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6],
            layout=OutputLayout(cfg.out),
            logger=get_run_logger(),
            t0=time.perf_counter(),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        swept = ContentStore(cfg.store_url).sweep_incoming()
        if swept:
            run.logger.info("store: removed %d partial downloads of killed runs", swept)
        return run

    def timed(self, stage: str, since: float, count: int, unit: str) -> None:
        self.times.append(StageTime(RUN_WIDE, stage, time.perf_counter() - since, count, unit))


def _catalog_stage(run: _Run, given: RunConfig) -> tuple[RunConfig, list[SubsetEntry], dict[str, Any]]:
    """Stage a benchmark-set layout (if any), catalog the release, record the run; returns the config the
    work reads (the staged release when there is one), the entries and the previous catalog."""
    tick = time.perf_counter()
    cfg, staged = _stage_source(given)
    if staged is not None:
        for st in staged.stats:
            bytes_read = st.bytes_stored + st.archive_bytes_read
            run.times.append(
                StageTime(
                    st.subset, "staging", st.seconds, st.rows, "rows", bytes_read, None, int(st.skipped)
                )
            )
            run.logger.info("staging %s: %s", st.subset, "current, skipped" if st.skipped else st)
        run.timed("staging", tick, len(staged.stats), "subsets")
    tick = time.perf_counter()
    entries = _catalog(cfg)
    if staged is not None:
        entries = _as_released(entries, given)
    entries, excluded = split_by_license(entries, cfg.source.license_allow)
    for subset, why in excluded:
        run.logger.warning("skipping %s: %s", subset, why)
    run.logger.info("catalog: %d subsets, %d rows", len(entries), sum(e.rows for e in entries))
    previous = read_previous_catalog(run.layout)
    for e in entries:  # a shorter JSONL than last time leaves parts that no batch owns any more
        remove_parts_from(run.layout, e.subset, len(e.batch_offsets) - 1)
    overrides = load_overrides(cfg.gate.gate_overrides)  # a bad override file fails before any work
    subsets = [e.subset for e in entries]
    record_run(run.layout, run.run_id, subsets=subsets, skip_gate=cfg.gate.skip_gate, overrides=overrides)
    run.timed("catalog", tick, len(entries), "subsets")
    return cfg, entries, previous


def _batch_stage(
    run: _Run, cfg: RunConfig, entries: list[SubsetEntry]
) -> tuple[RunSummary, list[tuple[SubsetEntry, SubsetOutcome]]]:
    """Every batch of every subset; the run's summary, and the subsets whose batches all completed."""
    tick = time.perf_counter()
    totals = _run_batches(entries, cfg)
    lines = sum(t.lines for t in totals.values() if isinstance(t, BatchStats))
    run.timed("batches", tick, lines, "rows")
    for subset, res in totals.items():
        if isinstance(res, BatchStats):
            run.times.extend(batch_stage_times(subset, res))
    summary = RunSummary(run_id=run.run_id, out=cfg.out)
    to_gate: list[tuple[SubsetEntry, SubsetOutcome]] = []
    for e in entries:
        res = totals[e.subset]
        outcome = SubsetOutcome(e.subset, e.license, res if isinstance(res, BatchStats) else BatchStats())
        summary.subsets.append(outcome)
        if isinstance(res, str):
            outcome.error, outcome.gate = res, f"not run ({res})"
            continue
        to_gate.append((e, outcome))
    return summary, to_gate


def _gate_stage(
    run: _Run, cfg: RunConfig, to_gate: list[tuple[SubsetEntry, SubsetOutcome]]
) -> list[tuple[SubsetEntry, SubsetOutcome]]:
    """The quality gate of each subset (in parallel); returns the subsets to publish."""
    tick = time.perf_counter()
    to_publish: list[tuple[SubsetEntry, SubsetOutcome]] = []
    gates = [] if cfg.gate.skip_gate else [(e, o, gate_task.submit(cfg, e, run.run_id)) for e, o in to_gate]
    progress.stage("gate", len(gates))
    for e, o in to_gate if cfg.gate.skip_gate else []:
        o.gate = "skipped (--skip-gate)"
        to_publish.append((e, o))
    for e, o, fut in gates:
        try:
            gate = fut.result()
        except Exception as exc:  # noqa: BLE001 - a broken gate holds the subset back, others go on
            o.gate = f"not run ({type(exc).__name__}: {exc})"
            continue
        finally:
            progress.advance("gate")
        o.gate = gate.summary()
        if not gate.passed:
            run.logger.warning("gate failed for %s: %s", e.subset, o.gate)
            continue
        to_publish.append((e, o))
    ready = []
    for e, o in to_publish:
        if o.stats.ok == 0:
            o.gate += " (nothing to publish: no ok samples)"
        else:
            ready.append((e, o))
    run.timed("gate", tick, len(to_gate), "subsets")
    return ready


def _publish_stage(run: _Run, cfg: RunConfig, ready: list[tuple[SubsetEntry, SubsetOutcome]]) -> None:
    """Each ready subset's Energon dataset (in parallel), swapped in whole."""
    tick = time.perf_counter()
    publishing = [(o, publish_task.submit(cfg, e.subset, run.run_id)) for e, o in ready]
    progress.stage("publish", len(publishing))
    for o, pfut in publishing:
        try:
            pub = pfut.result()
        except ShardsGateFailed as exc:
            o.gate = f"failed: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001
            o.error = f"publish failed: {type(exc).__name__}: {exc}"
            continue
        finally:
            progress.advance("publish")
        o.published, o.shards = True, pub.shards
    run.timed("publish", tick, sum(o.published for _, o in ready), "subsets")


def _validate_stage(run: _Run, cfg: RunConfig, summary: RunSummary) -> None:
    """Read every published dataset back as a trainer would, then write the metadataset over them."""
    tick = time.perf_counter()
    checks = [(o, validate_task.submit(cfg.out, o.subset)) for o in summary.subsets if o.published]
    progress.stage("validate", len(checks))
    for o, vfut in checks:
        try:
            o.validation = vfut.result()
        except Exception as exc:  # noqa: BLE001
            o.validation = f"failed: {type(exc).__name__}: {exc}"
        progress.advance("validate")
        if o.validation != "ok":
            run.logger.warning("validation of %s: %s", o.subset, o.validation)
    run.timed("validate", tick, len(checks), "subsets")
    publish_metadataset(run.layout)


def _report(
    run: _Run, given: RunConfig, summary: RunSummary, entries: list[SubsetEntry], previous: dict[str, Any]
) -> None:
    """The subsets table, stage times, the run record (the options as given) and the Prefect artifacts."""
    by_name = {e.subset: e for e in entries}
    for o in summary.subsets:
        row = catalog_columns(by_name[o.subset], previous.get(o.subset), run_id=run.run_id)
        write_subsets_row(run.layout, row | _outcome_columns(o, given))
    summary.seconds = time.perf_counter() - run.t0
    rows = sum(o.stats.lines for o in summary.subsets)
    run.times.append(StageTime(RUN_WIDE, "run", summary.seconds, rows, "rows"))
    write_stage_times(
        given.out, run.run_id, run.times, started_at=run.started_at, source_format=given.source.source_format
    )  # before the run record: a run with a record has its stage times
    record = {"config": given.model_dump(mode="json"), "summary": summary.to_dict()}
    atomic_write_bytes(
        run.layout.fs,
        f"{run.layout.root}/runs/{run.run_id}.json",
        json.dumps(record, indent=1, default=str).encode(),
    )
    rid = run.run_id
    create_markdown_artifact(
        key="vlmforge-run-summary",
        markdown=summary_markdown(summary),
        description=f"per-subset counts and tokens of run {rid}",
    )
    create_markdown_artifact(
        key="vlmforge-quality",
        markdown=publish_quality(run.layout, rid, run.logger),
        description=f"quality gate results of run {rid} (Data Docs linked)",
    )
    create_markdown_artifact(
        key="vlmforge-failures",
        markdown=failures_markdown(summary),
        description=f"rejected and dropped samples by class, run {rid}",
    )
