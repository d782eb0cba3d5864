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

from vlmforge.flows.runtime import LoopbackRayTaskRunner
from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.tasks.build_batch import BatchStats, build_batch, preset_for
from vlmforge.tasks.catalog import catalog_release
from vlmforge.tasks.gate import GateResult, run_gate
from vlmforge.tasks.manifests import OutputLayout, read_table, remove_parts_from, write_part
from vlmforge.tasks.publish import PublishResult, publish_metadataset, publish_subset
from vlmforge.tasks.storage import atomic_write_bytes


@dataclass
class SubsetOutcome:
    subset: str
    license: str
    stats: BatchStats
    gate: str = "not run"
    published: bool = False
    shards: int = 0
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


@task(
    name="build-batch",
    task_run_name="build {entry.subset} batch {index}/{n_batches}",
    retries=2,
    retry_delay_seconds=5,
)
def build_batch_task(entry: SubsetEntry, index: int, n_batches: int, cfg: RunConfig) -> BatchStats:
    return build_batch(entry, index, cfg)


@task(name="publish", task_run_name="publish {subset}", retries=1, retry_delay_seconds=5)
def publish_task(out: str, subset: str, shard_max_bytes: int, shard_max_samples: int) -> PublishResult:
    return publish_subset(
        OutputLayout(out), subset, shard_max_bytes=shard_max_bytes, shard_max_samples=shard_max_samples
    )


def _gate(entry: SubsetEntry, cfg: RunConfig) -> GateResult:
    layout = OutputLayout(cfg.out)
    preset = preset_for(cfg)
    return run_gate(
        entry.subset,
        read_table(layout, "samples", entry.subset),
        read_table(layout, "media", entry.subset),
        rows=entry.rows,
        max_pixels=cfg.max_pixels or preset.max_pixels,
        seq_len=cfg.seq_len,
        max_num_images=cfg.max_num_images,
        max_reject_rate=cfg.max_reject_rate,
    )


def _run_batches(entries: list[SubsetEntry], cfg: RunConfig) -> dict[str, BatchStats | str]:
    """Every batch of every subset, at most ``window`` in flight; a subset's error is kept, not raised."""
    work = [(e, i) for e in entries for i in range(len(e.batch_offsets) - 1)]
    window = max(2, 4 * (cfg.num_cpus or 2))
    totals: dict[str, BatchStats | str] = {e.subset: BatchStats() for e in entries}
    for start in range(0, len(work), window):
        wave = work[start : start + window]
        futures = [(e, build_batch_task.submit(e, i, len(e.batch_offsets) - 1, cfg)) for e, i in wave]
        for e, fut in futures:
            try:
                res = fut.result()
            except Exception as exc:  # noqa: BLE001 - one subset's failure must not stop the others
                totals[e.subset] = f"batch failed: {type(exc).__name__}: {exc}"
                continue
            prev = totals[e.subset]
            if isinstance(prev, BatchStats):
                totals[e.subset] = prev + res
    return totals


def _subsets_row(entry: SubsetEntry, o: SubsetOutcome, cfg: RunConfig, run_id: str) -> dict[str, Any]:
    return {
        "subset": entry.subset,
        "readme_sha256": entry.readme_sha256,
        "jsonl_sha256": entry.jsonl_sha256,
        "jsonl_bytes": entry.jsonl_bytes,
        "license": entry.license,
        "license_text": entry.license_text,
        "media_tars": len(entry.media_tars),
        "rows": entry.rows,
        "ok": o.stats.ok,
        "rejected": o.stats.rejected,
        "dropped": o.stats.dropped,
        "text_tokens": o.stats.text_tokens,
        "visual_tokens": o.stats.visual_tokens,
        "published": o.published,
        "gate": o.gate,
        "revision": None,
        "run_id": run_id,
    }


def summary_markdown(summary: RunSummary) -> str:
    lines = [
        f"# vlmforge run {summary.run_id}",
        "",
        "| subset | license | rows | ok | rejected | dropped | images | videos | text tokens | visual tokens"
        " | gate | published | shards |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for s in summary.subsets:
        st = s.stats
        gate = s.gate.replace("|", "/")[:300]
        lines.append(
            f"| {s.subset} | {s.license} | {st.lines} | {st.ok} | {st.rejected} | {st.dropped} | {st.images}"
            f" | {st.videos} | {st.text_tokens} | {st.visual_tokens} | {gate} | {s.published} | {s.shards} |"
        )
    return "\n".join(lines) + "\n"


@flow(
    name="vlmforge-run",
    flow_run_name="run {cfg.release}",
    task_runner=LoopbackRayTaskRunner(),
    log_prints=True,
)
def run_release(cfg: RunConfig, run_id: str | None = None) -> RunSummary:
    """Turn the release ``cfg.release`` into manifests and Energon datasets under ``cfg.out``."""
    logger = get_run_logger()
    t0 = time.perf_counter()
    run_id = run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    layout = OutputLayout(cfg.out)
    entries = catalog_release(cfg.release, subsets=cfg.subsets, batch_lines=cfg.batch_lines)
    logger.info("catalog: %d subsets, %d rows", len(entries), sum(e.rows for e in entries))
    for e in entries:  # a shorter JSONL than last time leaves parts that no batch owns any more
        remove_parts_from(layout, e.subset, len(e.batch_offsets) - 1)

    totals = _run_batches(entries, cfg)
    summary = RunSummary(run_id=run_id, out=cfg.out)
    to_publish: list[tuple[SubsetEntry, SubsetOutcome]] = []
    for e in entries:
        res = totals[e.subset]
        outcome = SubsetOutcome(e.subset, e.license, res if isinstance(res, BatchStats) else BatchStats())
        summary.subsets.append(outcome)
        if isinstance(res, str):
            outcome.error, outcome.gate = res, f"not run ({res})"
            continue
        if cfg.skip_gate:
            outcome.gate = "skipped (--skip-gate)"
        else:
            gate = _gate(e, cfg)
            outcome.gate = gate.summary()
            atomic_write_bytes(
                layout.fs,
                f"{layout.quality}/{run_id}/{e.subset}.json",
                json.dumps(
                    {
                        "subset": e.subset,
                        "passed": gate.passed,
                        "failures": gate.failures,
                        "results": gate.results,
                    },
                    default=str,
                    indent=1,
                ).encode(),
            )
            if not gate.passed:
                logger.warning("gate failed for %s: %s", e.subset, gate.summary())
                continue
        if outcome.stats.ok == 0:
            outcome.gate += " (nothing to publish: no ok samples)"
            continue
        to_publish.append((e, outcome))

    futures = [
        (o, publish_task.submit(cfg.out, e.subset, cfg.shard_max_bytes, cfg.shard_max_samples))
        for e, o in to_publish
    ]
    for o, fut in futures:
        try:
            pub = fut.result()
        except Exception as exc:  # noqa: BLE001
            o.error = f"publish failed: {type(exc).__name__}: {exc}"
            continue
        o.published, o.shards = True, pub.shards
    publish_metadataset(layout)
    by_name = {e.subset: e for e in entries}
    for o in summary.subsets:
        write_part(layout, "subsets", o.subset, 0, [_subsets_row(by_name[o.subset], o, cfg, run_id)])

    summary.seconds = time.perf_counter() - t0
    atomic_write_bytes(
        layout.fs,
        f"{layout.root}/runs/{run_id}.json",
        json.dumps(
            {"config": cfg.model_dump(mode="json"), "summary": summary.to_dict()}, indent=1, default=str
        ).encode(),
    )
    create_markdown_artifact(
        key="vlmforge-run-summary",
        markdown=summary_markdown(summary),
        description=f"per-subset counts and tokens of run {run_id}",
    )
    return summary
