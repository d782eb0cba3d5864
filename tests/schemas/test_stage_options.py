"""Each stage receives its own options (schemas/stage_options.py), not the run's config: the batch and publish
fingerprints made from them are byte for byte those an earlier vlmforge recorded from the whole config (an
existing output must not redo its batches or republish), and no stage's entry point takes a ``RunConfig``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from vlmforge.flows.stage_tasks import build_batch_task, gate_task, publish_task
from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork, GateWork, PublishWork, RunStages
from vlmforge.tasks.batch import batch_fingerprint, build_batch
from vlmforge.tasks.batch.knobs import RECORD_KNOBS, TOKEN_KNOBS
from vlmforge.tasks.batch.media_step import MediaStep
from vlmforge.tasks.batch.sample import SampleSteps
from vlmforge.tasks.batch.tokens_step import TokenStep, get_tokenizer
from vlmforge.tasks.gate import gate_subset, gate_subsets
from vlmforge.tasks.gate.check import gate_inputs
from vlmforge.tasks.publish import publish_fingerprint
from vlmforge.tasks.staging import stage_run_source

ENTRY = SubsetEntry(
    subset="photo_vqa",
    path="/r/photo_vqa",
    jsonl="/r/photo_vqa/photo_vqa.jsonl",
    readme_sha256="a" * 64,
    jsonl_sha256="b" * 64,
    jsonl_bytes=10,
    rows=2,
    license="CC-BY-4.0",
    license_text=None,
    batch_offsets=(0, 5, 10),
)

# (options, batch 1's fingerprint, the publish fingerprint), computed at bad7443 from the whole RunConfig
# (``batch_fingerprint(ENTRY, 1, cfg)``, ``publish_fingerprint(ENTRY, cfg)``), before the stages took their
# own options. They change only with PIPELINE_VERSION, the shipped gate suites or the fingerprint's formula:
# a change here redoes every batch or republishes every subset of every existing output.
RECORDED: dict[str, tuple[dict[str, Any], str, str]] = {
    "defaults": ({}, "a76f44ad9baea4da0b18f4dd", "4105bb91931ffc28a4b7f751"),
    "batch options": (
        dict(max_pixels=500_000, seq_len=4096, video_mode="frames", batch_lines=7, val_fraction=0.1),
        "255513aa77bbcec5662ac2a7",
        "159ad468a17c6be9516a49cc",
    ),
    "publish and gate options": (
        dict(shard_max_samples=3, max_reject_rate=0.9, skip_gate=True, sample_format="crude"),
        "a76f44ad9baea4da0b18f4dd",
        "d5fa0e35b851d603b1494f75",
    ),
    "neutral options": (
        dict(fetch_concurrency=3, executor="local", subsets=("x",), limit=5),
        "a76f44ad9baea4da0b18f4dd",
        "4105bb91931ffc28a4b7f751",
    ),
}


@pytest.mark.parametrize("case", list(RECORDED))
def test_fingerprints_are_those_recorded_from_the_whole_config(case: str) -> None:
    options, batch, publish = RECORDED[case]
    cfg = RunConfig.of(release="/r", out="/o", **options)
    stages = RunStages.of(cfg)
    assert stages.batch.media_fingerprint() == cfg.media_fingerprint()
    assert batch_fingerprint(ENTRY, 1, stages.batch) == batch
    assert publish_fingerprint(ENTRY, stages.publish) == publish


def test_each_stage_gets_the_run_values_it_reads() -> None:
    cfg = RunConfig.of(
        release="/r", out="/o", store="/s", source_format="mantis", max_pixels=1000, shard_max_samples=3
    )
    stages = RunStages.of(cfg)
    assert (stages.batch.out, stages.batch.store, stages.batch.staged) == ("/o", "/s", True)
    assert stages.batch.tokens.max_pixels == 1000
    assert stages.gate == GateWork(out="/o", gate=cfg.gate, tokens=cfg.tokens, media=cfg.media)
    assert stages.publish.shards.shard_max_samples == 3
    assert stages.publish.batch == stages.batch
    assert not BatchWork.of(RunConfig.of(release="/r", out="/o")).staged
    assert RunConfig.of(release="/r", out="/o").store_url == PublishWork.of(cfg.replace(store=None)).store


ENTRY_POINTS: list[Callable[..., Any]] = [
    build_batch_task.fn,
    build_batch,
    batch_fingerprint,
    MediaStep.__init__,
    TokenStep.__init__,
    get_tokenizer,
    SampleSteps.__init__,
    *RECORD_KNOBS.values(),
    *TOKEN_KNOBS.values(),
    gate_task.fn,
    gate_subset,
    gate_subsets,
    gate_inputs,
    publish_task.fn,
    publish_fingerprint,
    stage_run_source,
]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS, ids=lambda f: f.__qualname__)
def test_no_stage_entry_point_takes_the_run_config(entry_point: Callable[..., Any]) -> None:
    # annotations are strings here (``from __future__ import annotations``), some under TYPE_CHECKING only
    annotations = [str(p.annotation) for p in inspect.signature(entry_point).parameters.values()]
    assert not [a for a in annotations if "RunConfig" in a], entry_point.__name__
