"""The remote-cluster path for real: a Ray head started as its own process (``ray start --head``) on loopback,
the pipeline flow run against it with ``ray_address``, its batches executed by that cluster's workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vlmforge.schemas.config import RunConfig

pytestmark = pytest.mark.slow

SUBSETS = ("photo_vqa", "multi_image")


def _job_of_this_driver(address: str) -> str:
    """The Ray job id the head recorded for a driver of this process (asked of the head's GCS)."""
    import ray
    from ray._private.state import state

    ray.init(address=address, _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False)
    try:
        mine = [j for j in state.job_table() if j["DriverPid"] == os.getpid() and j["IsDead"]]
    finally:
        ray.shutdown()
    assert mine, "the head has no finished job of this process: the flow did not use it"
    return str(mine[0]["JobID"])


def test_pipeline_runs_on_a_separate_ray_head_process(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    import ray

    from vlmforge.flows.ops import runner_for
    from vlmforge.flows.pipeline import run_release
    from vlmforge.flows.runtime.embedded import embedded_runtime
    from vlmforge.flows.runtime.ray_head import ray_head
    from vlmforge.tasks.manifests import OutputLayout, read_table

    assert not ray.is_initialized()
    out = tmp_path / "out"
    with embedded_runtime() as api_url, ray_head(num_cpus=2, env={"PREFECT_API_URL": api_url}) as head:
        assert head.proc.poll() is None and head.address.startswith("127.0.0.1:")
        cfg = RunConfig(
            release=str(sample_release),
            out=str(out),
            subsets=SUBSETS,
            batch_lines=4,
            max_reject_rate=0.9,
            ray_address=head.address,
        )
        runner = runner_for(cfg)
        summary = run_release.with_options(task_runner=runner)(cfg)
        assert runner._local_home is None and not ray.is_initialized()  # no local Ray was started
        job = _job_of_this_driver(head.address)
        worker_logs = "".join(p.read_text(errors="replace") for p in head.logs.glob("worker-*.out"))
        head_proc, logs = head.proc, head.logs
    assert head_proc.poll() is not None and not logs.exists()  # stopped, by its own process id

    assert summary.failed == [], summary
    assert sorted(s.subset for s in summary.subsets) == sorted(SUBSETS)
    layout = OutputLayout(str(out))
    for subset in SUBSETS:
        samples = read_table(layout, "samples", subset).to_pylist()
        assert samples and any(r["status"] == "ok" for r in samples), subset
        assert list((out / "energon" / subset).glob("train-*.tar")), subset
    assert all(f"./{s}" in (out / "energon" / "metadataset.yaml").read_text() for s in SUBSETS)
    # The batches ran in that cluster's worker processes, for this process's driver (Ray's own records).
    assert f":job_id:{job}" in worker_logs
    assert ":task_name:build-batch" in worker_logs
