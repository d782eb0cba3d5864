"""The executor seam (flows/runtime/executors.py): the same release run by the local executor (threads of this
process) and by Ray writes the same bytes, so the tests that run flows locally prove what a Ray run does.
Ray stays the default of ``vlmforge run`` and of every flow's configuration."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import output_hashes, run_flow

from vlmforge.flows.pipeline import run_release
from vlmforge.flows.runtime.embedded import LoopbackRayTaskRunner
from vlmforge.flows.runtime.executors import LocalTaskRunner, runner_for
from vlmforge.schemas.config import RunConfig

pytestmark = pytest.mark.slow


def test_ray_is_the_default_executor_of_a_run_and_of_the_flow() -> None:
    cfg = RunConfig.of(release="r", out="o")
    assert cfg.execution.executor == "ray"
    assert isinstance(runner_for(cfg), LoopbackRayTaskRunner)
    assert isinstance(run_release.task_runner, LoopbackRayTaskRunner)
    local = runner_for(RunConfig.of(release="r", out="o", executor="local", num_cpus=3))
    assert isinstance(local, LocalTaskRunner) and local._max_workers == 3


def test_the_sample_release_through_ray_and_through_the_local_executor_writes_the_same_bytes(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    outs = {}
    for executor in ("ray", "local"):
        out = tmp_path / executor
        cfg = RunConfig(release=str(sample_release), out=str(out), max_reject_rate=0.9, num_cpus=2)
        summary = run_flow(cfg, executor=executor)
        assert summary.failed == [] and all(s.validation == "ok" for s in summary.subsets), summary
        outs[executor] = output_hashes(str(out))
    ray, local = outs["ray"], outs["local"]
    assert any(k.startswith("manifests/samples/") for k in ray)
    assert any(k.startswith("energon/") and k.endswith(".tar") for k in ray)
    assert local == ray, sorted(k for k in set(ray) | set(local) if ray.get(k) != local.get(k))
