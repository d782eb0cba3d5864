"""The ``vlmforge run`` flow: catalog -> batches (parse, media, tokens) -> gate -> publish -> report.

Flows only wire, retry and report; the work is in ``vlmforge.tasks``. Batches fan out over Ray through
Prefect's RayTaskRunner in bounded waves, so the Prefect API sees hundreds of task runs, not millions.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
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
from ..tasks.gate.docs import build_data_docs
from ..tasks.gate.params import load_overrides
from ..tasks.gate.report import quality_markdown
from ..tasks.gate.results import GateResult, load_run, record_gate, record_run
from ..tasks.gate.shards import ShardsGateFailed, shards_check
from ..tasks.manifests import OutputLayout, remove_parts_from
from ..tasks.ops.stats.stage_times import RUN_WIDE, StageTime, batch_stage_times, write_stage_times
from ..tasks.publish.publish import PublishResult, publish_metadataset, publish_subset
from ..tasks.publish.validate import validate_subset
from ..tasks.storage import ContentStore, OutputFullError, atomic_write_bytes
from . import progress
from .runtime import LoopbackRayTaskRunner


@dataclass
class SubsetOutcome:
    subset: str
    license: str
    stats: BatchStats
    gate: str = "not run"
    published: bool = False
    shards: int = 0
    validation: str = "not run"
    error: str | None = None


@dataclass
class RunSummary:
    run_id: str
    out: str
    subsets: list[SubsetOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [s.subset for s in self.subsets if not s.published]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "out": self.out,
            "seconds": self.seconds,
            "subsets": [asdict(s) for s in self.subsets],
            "failed": self.failed,
        }


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


def summary_markdown(summary: RunSummary) -> str:
    lines = [
        f"# vlmforge run {summary.run_id}",
        "",
        "| subset | license | rows | ok | rejected | dropped | images | videos | text tokens | visual tokens"
        " | gate | published | shards | validation | fetched | fetch failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|",
    ]
    for s in summary.subsets:
        st = s.stats
        gate = s.gate.replace("|", "/")[:300]
        lines.append(
            f"| {s.subset} | {s.license} | {st.lines} | {st.ok} | {st.rejected} | {st.dropped} | {st.images}"
            f" | {st.videos} | {st.text_tokens} | {st.visual_tokens} | {gate} | {s.published} | {s.shards}"
            f" | {s.validation} | {st.fetched} | {st.fetch_failed} |"
        )
    return "\n".join(lines) + "\n"


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
    import dataclasses

    revision = release_revision(cfg.source.release)
    return [
        dataclasses.replace(e, release=cfg.source.release, revision=revision or e.revision) for e in entries
    ]


def _with_recipe_fingerprint(entry: SubsetEntry, cfg: RunConfig) -> SubsetEntry:
    import dataclasses

    recipe = find_recipe(entry.subset, cfg.media.catalogs)
    if recipe is None:
        return entry
    return dataclasses.replace(entry, media_recipe_sha256=recipe_fingerprint(recipe))


def _publish_quality(layout: OutputLayout, run_id: str, logger: Any) -> str:
    """Data Docs of the run and their Markdown summary (for the artifact); never fails the run."""
    try:
        docs = build_data_docs(layout, run_id)
        return quality_markdown(load_run(layout, run_id), docs)
    except Exception as exc:  # noqa: BLE001 - the gate decided already; the report is a convenience
        logger.warning("quality report not built: %s: %s", type(exc).__name__, exc)
        return f"# Quality gate of run {run_id}\n\nreport not built: {type(exc).__name__}: {exc}\n"


def failures_markdown(summary: RunSummary) -> str:
    """Rejected and dropped samples and failed subsets, by class (the first word of each reason)."""
    import duckdb

    lines = [f"# Failures of run {summary.run_id}", ""]
    for s in summary.subsets:
        if s.error or not s.published:
            lines.append(f"- **{s.subset}** not published: {(s.error or s.gate)[:300]}")
    try:
        from ..tasks.ops.query import connect

        con = connect(summary.out)
        rows = con.execute(
            "SELECT subset, status, split_part(reason, ':', 1) AS class, count(*) AS n FROM samples "
            "WHERE status <> 'ok' GROUP BY ALL ORDER BY subset, n DESC"
        ).fetchall()
    except (duckdb.Error, OSError, ImportError) as exc:
        lines.append(f"\n(no manifest query: {exc})")
        rows = []
    if rows:
        lines += ["", "| subset | status | class | samples |", "|---|---|---|---:|"]
        lines += [f"| {sub} | {st} | {cls} | {n} |" for sub, st, cls, n in rows]
    return "\n".join(lines) + "\n"


@flow(
    name="vlmforge-run",
    flow_run_name="run {cfg.source.release}",
    task_runner=LoopbackRayTaskRunner(),
    log_prints=True,
)
def run_release(cfg: RunConfig, run_id: str | None = None) -> RunSummary:
    """Turn the release ``cfg.source.release`` into manifests and Energon datasets under ``cfg.out``."""
    logger = get_run_logger()
    t0 = time.perf_counter()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run_id = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    layout = OutputLayout(cfg.out)
    times: list[StageTime] = []
    swept = ContentStore(cfg.store_url).sweep_incoming()
    if swept:
        logger.info("store: removed %d partial downloads of killed runs", swept)
    given = cfg  # recorded with the run; ``cfg`` below reads the staged release when there is one
    tick = time.perf_counter()
    cfg, staged = _stage_source(given)
    if staged is not None:
        for st in staged.stats:
            times.append(
                StageTime(
                    st.subset,
                    "staging",
                    st.seconds,
                    st.rows,
                    "rows",
                    st.bytes_stored + st.archive_bytes_read,
                    None,
                    int(st.skipped),
                )  # fmt: skip
            )
            logger.info("staging %s: %s", st.subset, "current, skipped" if st.skipped else st)
        times.append(StageTime(RUN_WIDE, "staging", time.perf_counter() - tick, len(staged.stats), "subsets"))
    tick = time.perf_counter()
    entries = _catalog(cfg)
    if staged is not None:
        entries = _as_released(entries, given)
    entries, excluded = split_by_license(entries, cfg.source.license_allow)
    for subset, why in excluded:
        logger.warning("skipping %s: %s", subset, why)
    logger.info("catalog: %d subsets, %d rows", len(entries), sum(e.rows for e in entries))
    previous = read_previous_catalog(layout)
    for e in entries:  # a shorter JSONL than last time leaves parts that no batch owns any more
        remove_parts_from(layout, e.subset, len(e.batch_offsets) - 1)
    overrides = load_overrides(cfg.gate.gate_overrides)  # a bad override file fails before any work
    record_run(
        layout, run_id, subsets=[e.subset for e in entries], skip_gate=cfg.gate.skip_gate, overrides=overrides
    )
    times.append(StageTime(RUN_WIDE, "catalog", time.perf_counter() - tick, len(entries), "subsets"))

    tick = time.perf_counter()
    totals = _run_batches(entries, cfg)
    lines = sum(t.lines for t in totals.values() if isinstance(t, BatchStats))
    times.append(StageTime(RUN_WIDE, "batches", time.perf_counter() - tick, lines, "rows"))
    for subset, res in totals.items():
        if isinstance(res, BatchStats):
            times.extend(batch_stage_times(subset, res))
    summary = RunSummary(run_id=run_id, out=cfg.out)
    to_gate: list[tuple[SubsetEntry, SubsetOutcome]] = []
    for e in entries:
        res = totals[e.subset]
        outcome = SubsetOutcome(e.subset, e.license, res if isinstance(res, BatchStats) else BatchStats())
        summary.subsets.append(outcome)
        if isinstance(res, str):
            outcome.error, outcome.gate = res, f"not run ({res})"
            continue
        to_gate.append((e, outcome))

    tick = time.perf_counter()
    to_publish: list[tuple[SubsetEntry, SubsetOutcome]] = []
    gates = [] if cfg.gate.skip_gate else [(e, o, gate_task.submit(cfg, e, run_id)) for e, o in to_gate]
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
            logger.warning("gate failed for %s: %s", e.subset, o.gate)
            continue
        to_publish.append((e, o))
    ready = []
    for e, o in to_publish:
        if o.stats.ok == 0:
            o.gate += " (nothing to publish: no ok samples)"
        else:
            ready.append((e, o))

    times.append(StageTime(RUN_WIDE, "gate", time.perf_counter() - tick, len(to_gate), "subsets"))
    tick = time.perf_counter()
    publishing = [(o, publish_task.submit(cfg, e.subset, run_id)) for e, o in ready]
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
    published = sum(o.published for o in summary.subsets)
    times.append(StageTime(RUN_WIDE, "publish", time.perf_counter() - tick, published, "subsets"))
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
            logger.warning("validation of %s: %s", o.subset, o.validation)
    times.append(StageTime(RUN_WIDE, "validate", time.perf_counter() - tick, len(checks), "subsets"))
    publish_metadataset(layout)
    by_name = {e.subset: e for e in entries}
    for o in summary.subsets:
        e = by_name[o.subset]
        row = catalog_columns(e, previous.get(o.subset), run_id=run_id) | _outcome_columns(o, cfg)
        write_subsets_row(layout, row)

    summary.seconds = time.perf_counter() - t0
    times.append(
        StageTime(RUN_WIDE, "run", summary.seconds, sum(o.stats.lines for o in summary.subsets), "rows")
    )
    write_stage_times(
        cfg.out, run_id, times, started_at=started_at, source_format=given.source.source_format
    )  # before the run record: a run with a record has its stage times
    atomic_write_bytes(
        layout.fs,
        f"{layout.root}/runs/{run_id}.json",
        json.dumps(
            {"config": given.model_dump(mode="json"), "summary": summary.to_dict()}, indent=1, default=str
        ).encode(),
    )
    create_markdown_artifact(
        key="vlmforge-run-summary",
        markdown=summary_markdown(summary),
        description=f"per-subset counts and tokens of run {run_id}",
    )
    create_markdown_artifact(
        key="vlmforge-quality",
        markdown=_publish_quality(layout, run_id, logger),
        description=f"quality gate results of run {run_id} (Data Docs linked)",
    )
    create_markdown_artifact(
        key="vlmforge-failures",
        markdown=failures_markdown(summary),
        description=f"rejected and dropped samples by class, run {run_id}",
    )
    return summary
