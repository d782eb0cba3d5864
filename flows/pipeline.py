"""The ``vlmforge run`` flow: catalog -> batches (parse, media, tokens) -> gate -> publish -> report.

Flows only wire, retry and report; the work is in ``vlmforge.tasks``. Batches fan out over Ray through
Prefect's RayTaskRunner in bounded waves, so the Prefect API sees hundreds of task runs, not millions.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from ..schemas.config import RunConfig
from ..schemas.records import SubsetEntry
from ..schemas.stage_options import PublishWork, RunStages
from ..tasks.batch import BatchStats
from ..tasks.catalog import (
    catalog_columns,
    catalog_release,
    read_previous_catalog,
    split_by_license,
    write_subsets_row,
)
from ..tasks.gate import GateResult, load_overrides, record_run
from ..tasks.manifests import OutputLayout, remove_parts_from
from ..tasks.ops import RUN_WIDE, StageTime, batch_stage_times, write_stage_times
from ..tasks.publish import (
    PublishResult,
    energon_view,
    metadataset_val_problem,
    publish_metadataset,
    val_split_note,
)
from ..tasks.staging import as_released, stage_run_source
from ..tasks.storage import ContentStore, OutputFullError, atomic_write_bytes
from .docs_link import served_docs_url
from .grouping import StageQueues, pack_batches
from .publish_records import PublishRecords
from .run_names import run_name
from .runtime import progress
from .runtime.embedded import LoopbackRayTaskRunner, configured_api_url, hand_back_freed_memory
from .runtime.executors import executor_cpus
from .schedule import GATE, PUBLISH, VALIDATE, StageSpans, SubsetSchedule
from .stage_tasks import (
    SubsetFailure,
    build_batch_task,
    gate_task,
    group_label,
    publish_task,
    quality_docs_task,
    validate_task,
)
from .summary import RunSummary, SubsetOutcome, failures_markdown, summary_markdown


def _cluster_cpus(cfg: RunConfig) -> int:
    """CPUs the run's tasks have (one batch runs per CPU)."""
    return executor_cpus(cfg.execution)


def _window(cpus: int) -> int:
    """Batches kept in flight: twice the cluster's CPUs, so every core stays busy while results drain and
    the Prefect API and Ray's scheduler see a bounded number of task runs, never one per row."""
    return max(2, 2 * cpus)


def _outcome_columns(o: SubsetOutcome, cfg: RunConfig) -> dict[str, Any]:
    counts = ("ok", "rejected", "dropped", "text_tokens", "visual_tokens")
    return {c: getattr(o.stats, c) for c in counts} | {
        "beyond_limit": o.beyond_limit,
        "published": o.published,
        "gate": o.gate,
        "skip_gate": cfg.gate.skip_gate,
    }


def _catalog(cfg: RunConfig) -> list[SubsetEntry]:
    return catalog_release(
        cfg.source.release,
        subsets=cfg.source.subsets,
        batch_lines=cfg.batches.batch_lines,
        storage_options=cfg.source.storage_options,
        recipe_dirs=cfg.media.catalogs,
        batch_media=cfg.batches.batch_media,
        min_batches=_window(_cluster_cpus(cfg)),  # a small release still gives every core work to the end
        limit=cfg.source.limit,
    )


@flow(
    name="vlmforge-run",
    flow_run_name=run_name,  # release and output folder
    task_runner=LoopbackRayTaskRunner(),
    log_prints=True,
)
def run_release(cfg: RunConfig, run_id: str | None = None) -> RunSummary:
    """Turn the release ``cfg.source.release`` into manifests and Energon datasets under ``cfg.out``."""
    run = _Run.start(cfg, run_id)
    work, entries, previous = _catalog_stage(run, cfg)
    summary = RunSummary(run_id=run.run_id, out=work.out)
    summary.subsets = [
        SubsetOutcome(e.subset, e.license, BatchStats(), beyond_limit=e.beyond_limit) for e in entries
    ]
    _work_stage(run, work, entries, summary)
    _note_partial(run, cfg, summary)
    publish_metadataset(run.layout)
    _note_empty_splits(run, work, summary)
    _report(run, cfg, summary, entries, previous)
    return summary


def _note_partial(run: _Run, cfg: RunConfig, summary: RunSummary) -> None:
    """A trial run (``--limit``) says which subsets it left partial, in their gate column and once in the log:
    their rows beyond the limit are neither ok nor rejected, and a run without ``--limit`` completes them."""
    partial = [o for o in summary.subsets if o.beyond_limit]
    for o in partial:
        o.gate += f" (partial: --limit {cfg.source.limit}, {o.beyond_limit:,} rows beyond it)"
    if partial:
        run.logger.warning(
            "trial run (--limit %d): %d subset(s) partial, %s rows not taken; run without --limit to "
            "complete them",
            cfg.source.limit,
            len(partial),
            f"{sum(o.beyond_limit for o in partial):,}",
        )


def _note_empty_splits(run: _Run, cfg: RunConfig, summary: RunSummary) -> None:
    """A published subset without val samples is noted (its gate column); a metadataset without any val
    split, while ``--val-fraction`` asks for one, is warned of (see tasks/publish/splits.py)."""
    fraction = cfg.batches.val_fraction
    with energon_view(run.layout) as energon:  # OUT/energon itself, or a local copy of its listings
        for o in summary.subsets:
            note = val_split_note(energon / o.subset, fraction) if o.published else None
            if note:
                o.gate += f" ({note})"
        problem = metadataset_val_problem(energon, fraction)
    if problem:
        run.logger.warning(problem)


@dataclass
class _Run:
    """What the steps of one run share: its id, output, clock and stage times."""

    run_id: str
    layout: OutputLayout
    logger: Any
    t0: float
    started_at: str
    records: PublishRecords
    times: list[StageTime] = field(default_factory=list)

    @classmethod
    def start(cls, cfg: RunConfig, run_id: str | None) -> _Run:
        run_id = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
        layout = OutputLayout(cfg.out)
        run = cls(
            run_id=run_id,
            layout=layout,
            logger=get_run_logger(),
            t0=time.perf_counter(),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            records=PublishRecords(layout, run_id),
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
    source, staged = stage_run_source(given.source, given.out, given.store_url)
    cfg = given.model_copy(update={"source": source})
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
    # the scan of every JSONL left its buffers in the driver's heap, which lives as long as the run: at
    # 200,000 rows ~18 MB, part of the whole run's peak
    hand_back_freed_memory()
    if staged is not None:
        entries = as_released(entries, given.source.release)
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


@dataclass
class _Pending:
    """A submitted task the work loop waits for: its kind and the subset of each of its items (a batch
    task: one per batch, a subset repeated for each of its batches; a stage task: one per subset)."""

    kind: str
    entries: list[SubsetEntry]


def _work_stage(run: _Run, cfg: RunConfig, entries: list[SubsetEntry], summary: RunSummary) -> None:
    """Every batch of every subset through a sliding window (a finished batch makes room for the next, so
    one slow batch never idles the cluster); a subset's gate, publish and read-back start as soon as its own
    batches are done, while other subsets' batches still run. Small work is grouped into tasks
    (:mod:`.grouping`). A subset's error is kept, not raised."""
    from prefect.futures import PrefectFuture, as_completed

    outcomes = {o.subset: o for o in summary.subsets}
    by_name = {e.subset: e for e in entries}
    stages = RunStages.of(cfg)  # each stage's task gets its own options, not the run's config
    schedule = SubsetSchedule(
        ((e.subset, len(e.batch_offsets) - 1) for e in entries), skip_gate=cfg.gate.skip_gate
    )
    cpus = _cluster_cpus(cfg)
    work = [(e, i) for e in entries for i in range(len(e.batch_offsets) - 1)]
    todo = iter(pack_batches(work, cfg.batches.batch_lines, _window(cpus)))
    queues: StageQueues[SubsetEntry] = StageQueues((GATE, PUBLISH, VALIDATE), slots=cpus)
    clock = StageSpans()
    pending: dict[PrefectFuture[Any], _Pending] = {}
    in_flight = [0]  # batch tasks submitted and not yet finished
    progress.subsets((e.subset, len(e.batch_offsets) - 1, e.rows) for e in entries)
    progress.stage("batches", len(work))

    def submit_ready() -> None:
        for kind, group in queues.take():
            if clock.started(kind):
                progress.stage(kind, len(entries))
            names = [e.subset for e in group]
            for name in names:
                progress.subset_stage(name, kind)
            pending[_submit_stage(kind, stages, group, run.run_id)] = _Pending(kind, group)

    def fill_window() -> None:
        while in_flight[0] < _window(cpus):
            pack = next(todo, None)
            if pack is None:
                return
            clock.started("batches")
            label = group_label([f"{e.subset} batch {i}/{len(e.batch_offsets) - 1}" for e, i in pack])
            # as many batches fetch at once as the cluster has CPUs: they split the per-host limits
            pending[build_batch_task.submit(pack, stages.batch, cpus, label)] = _Pending(
                "batches", [e for e, _ in pack]
            )
            in_flight[0] += 1

    def then(stage: str | None, e: SubsetEntry) -> None:
        if stage is not None:
            queues.add(stage, e)

    for subset in schedule.ready_now():  # no batch at all (an empty JSONL)
        then(_batches_done(run, schedule, outcomes[subset], by_name[subset], stages.publish), by_name[subset])
    fill_window()
    submit_ready()
    while pending:
        fut = next(as_completed(list(pending)))
        p = pending.pop(fut)
        if p.kind == "batches":
            in_flight[0] -= 1
            fill_window()
            for e, nxt in _batches_finished(run, schedule, fut, p, stages.publish, clock, outcomes):
                then(nxt, e)
        else:
            queues.done(p.kind)
            results = _group_results(fut, len(p.entries))
            for e, res in zip(p.entries, results, strict=True):
                o = outcomes[e.subset]
                if p.kind == GATE:
                    then(_gate_finished(run, schedule, res, o, clock), e)
                elif p.kind == PUBLISH:
                    then(_publish_finished(schedule, res, o, clock), e)
                    run.records.published(o)
                else:
                    _validate_finished(run, schedule, res, o, clock)
                    run.records.validated(o)
        submit_ready()
    run.times.extend(clock.times())
    summary.events = schedule.events


def _submit_stage(kind: str, stages: RunStages, group: list[SubsetEntry], run_id: str) -> Any:
    """The task of stage ``kind`` for the subsets of ``group``."""
    names = [e.subset for e in group]
    label = group_label(names)
    if kind == GATE:
        return gate_task.submit(stages.gate, group, run_id, label)
    if kind == PUBLISH:
        return publish_task.submit(stages.publish, names, run_id, label)
    return validate_task.submit(stages.publish.out, names, label)


def _group_results(fut: Any, n: int) -> list[Any]:
    """A stage task's per-subset results; a task that failed as a whole fails each of its subsets."""
    try:
        results: list[Any] = fut.result()
    except Exception as exc:  # noqa: BLE001 - a lost task holds its subsets back, others go on
        return [SubsetFailure.of(exc)] * n
    return results


def _batches_finished(
    run: _Run,
    schedule: SubsetSchedule,
    fut: Any,
    p: _Pending,
    publish: PublishWork,
    clock: StageSpans,
    outcomes: dict[str, SubsetOutcome],
) -> list[tuple[SubsetEntry, str | None]]:
    """A batch task's batches are in: the subsets whose last batch this was, with the stage each goes to."""
    try:
        results: list[BatchStats | str] = fut.result()
    except Exception as exc:  # noqa: BLE001 - one subset's failure must not stop the others
        if isinstance(exc, OutputFullError):  # no other batch can succeed either: stop, resume later
            raise
        results = [f"batch failed: {type(exc).__name__}: {exc}"] * len(p.entries)
    finished = []
    for entry, res in zip(p.entries, results, strict=True):
        progress.advance("batches")
        clock.finished("batches", res.lines if isinstance(res, BatchStats) else 0)
        done = res if isinstance(res, BatchStats) else BatchStats()
        progress.batch_finished(entry.subset, done.lines, done.images, done.skipped_batches > 0)
        if schedule.batch_done(entry.subset, res):
            finished.append((entry, _batches_done(run, schedule, outcomes[entry.subset], entry, publish)))
    return finished


def _batches_done(
    run: _Run, schedule: SubsetSchedule, o: SubsetOutcome, entry: SubsetEntry, publish: PublishWork
) -> str | None:
    """A subset's last batch is in: its outcome and stage times, and the stage it goes to (None for a
    subset left as it is: failed, nothing to publish, or unchanged since its last publish)."""
    subset = entry.subset
    state = schedule.subsets[subset]
    o.stats = state.stats
    if state.error is not None:
        o.error, o.gate = state.error, f"not run ({state.error})"
    else:
        run.times.extend(batch_stage_times(subset, state.stats))
        if publish.gate.skip_gate:
            o.gate = "skipped (--skip-gate)"
        all_current = state.stats.skipped_batches == state.stats.batches
        validated = run.records.unchanged(entry, publish, o, all_current=all_current)
        if validated is not None:
            return schedule.unchanged(subset, validated=validated)
    nxt = schedule.batches_finished(subset)
    if nxt is None and state.error is None and o.stats.ok == 0 and publish.gate.skip_gate:
        o.gate += " (nothing to publish: no ok samples)"
    return nxt


def _gate_finished(
    run: _Run, schedule: SubsetSchedule, gate: GateResult | SubsetFailure, o: SubsetOutcome, clock: StageSpans
) -> str | None:
    clock.finished(GATE)
    progress.advance(GATE, subset=o.subset)
    if isinstance(gate, SubsetFailure):  # a broken gate holds the subset back, others go on
        o.gate = f"not run ({gate.message})"
        return schedule.gate_done(o.subset, passed=False)
    o.gate = gate.summary()
    if not gate.passed:
        run.logger.warning("gate failed for %s: %s", o.subset, o.gate)
    nxt = schedule.gate_done(o.subset, passed=gate.passed)
    if gate.passed and nxt is None:
        o.gate += " (nothing to publish: no ok samples)"
    return nxt


def _publish_finished(
    schedule: SubsetSchedule, pub: PublishResult | SubsetFailure, o: SubsetOutcome, clock: StageSpans
) -> str | None:
    if isinstance(pub, SubsetFailure):
        if pub.shards_gate:
            o.gate = f"failed: {pub.detail}"
        else:
            o.error = f"publish failed: {pub.message}"
    else:
        o.published, o.shards = True, pub.shards
    progress.advance(PUBLISH, subset=o.subset)
    clock.finished(PUBLISH, int(o.published))
    return schedule.publish_done(o.subset, published=o.published)


def _validate_finished(
    run: _Run, schedule: SubsetSchedule, validation: str | SubsetFailure, o: SubsetOutcome, clock: StageSpans
) -> None:
    """The published dataset read back as a trainer would."""
    o.validation = f"failed: {validation.message}" if isinstance(validation, SubsetFailure) else validation
    progress.advance(VALIDATE, subset=o.subset)
    clock.finished(VALIDATE)
    schedule.validate_done(o.subset)
    if o.validation != "ok":
        run.logger.warning("validation of %s: %s", o.subset, o.validation)


def _quality_markdown(run: _Run, summary: RunSummary) -> str:
    """The quality artifact: the run's Data Docs, built and linked (none when no gate ran)."""
    if summary.subsets and all(o.unchanged for o in summary.subsets):
        return (
            f"# Quality gate of run {run.run_id}\n\nEvery subset is unchanged since its last publish: "
            f"no gate ran, the earlier verdicts stand (`vlmforge quality {run.layout.out}`).\n"
        )
    served = served_docs_url(run.layout.out, run.run_id, configured_api_url())  # `vlmforge server --docs OUT`
    result: str = quality_docs_task.submit(run.layout.out, run.run_id, served).result()
    return result


def _report(
    run: _Run, given: RunConfig, summary: RunSummary, entries: list[SubsetEntry], previous: dict[str, Any]
) -> None:
    """The subsets table, stage times, the run record (the options as given) and the Prefect artifacts."""
    by_name = {e.subset: e for e in entries}
    for o in summary.subsets:
        row = catalog_columns(by_name[o.subset], previous.get(o.subset), run_id=run.run_id)
        write_subsets_row(run.layout, row | _outcome_columns(o, given))
    quality = _quality_markdown(run, summary)
    # the Data Docs are built before the clock stops: the run's time (the estimate's rates) includes them
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
        markdown=quality,
        description=f"quality gate results of run {rid} (Data Docs linked)",
    )
    create_markdown_artifact(
        key="vlmforge-failures",
        markdown=failures_markdown(summary),
        description=f"rejected and dropped samples by class, run {rid}",
    )
