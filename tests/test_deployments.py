"""The operations path for real: a Prefect server on loopback, the deployments of prefect.yaml registered
with `prefect deploy`, one run through a real process worker, checked over the Prefect API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlmforge.flows.runtime import _free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
PREFECT = [sys.executable, "-m", "prefect", "--no-prompt"]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[dict[str, str]]:
    port = _free_port()
    env = os.environ.copy() | {
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "VLMFORGE_HOME": str(REPO),
    }
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        import urllib.request

        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{env['PREFECT_API_URL']}/health", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "server.log"
                ).read_text()
                time.sleep(0.5)
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _prefect(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    res = subprocess.run(
        [*PREFECT, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert res.returncode == 0, f"prefect {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def test_deployments_register_and_run_through_a_worker(
    server: dict[str, str], sample_release: Path, tmp_path: Path
) -> None:
    env = server
    _prefect(env, "work-pool", "create", "vlmforge-local", "--type", "process")
    _prefect(env, "deploy", "--all", "--prefect-file", str(REPO / "prefect.yaml"))

    out = tmp_path / "out"
    params = {"cfg": {"release": str(sample_release), "out": str(out), "max_reject_rate": 0.9}}
    started = _prefect(
        env, "deployment", "run", "vlmforge-run/sample-release", "--params", json.dumps(params)
    )
    flow_run_id = next(w for w in started.split() if len(w) == 36 and w.count("-") == 4)
    worker_log = _prefect(env, "worker", "start", "--pool", "vlmforge-local", "--run-once", timeout=900)

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with (
        temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}),
        get_client(sync_client=True) as client,
    ):
        names = {d.name for d in client.read_deployments()}
        assert {"nemotron-v3-full", "nemotron-v3-subset", "sample-release"} <= names
        run = client.read_flow_run(flow_run_id)
        deadline = time.monotonic() + 120
        while not run.state or not run.state.is_final():
            assert time.monotonic() < deadline, run.state
            time.sleep(2)
            run = client.read_flow_run(flow_run_id)
        assert run.state.is_completed(), f"{run.state}\n{worker_log[-3000:]}"
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )
    summary = next(a for a in artifacts if a.key == "vlmforge-run-summary")
    assert "| photo_vqa |" in str(summary.data) and "| video_qa |" in str(summary.data)
    assert (out / "energon" / "metadataset.yaml").is_file(), summary.data
