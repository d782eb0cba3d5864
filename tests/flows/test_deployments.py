"""The operations path for real: a Prefect server on loopback, the deployments of prefect.yaml registered
with `prefect deploy`, runs through a real process worker, checked (state, names, artifacts) over the API.

The flow runs use a Ray head started beforehand as its own process (the worker passes ``RAY_ADDRESS`` to
them), as a deployment on a cluster does: a flow-run subprocess that had to start its own Ray could run
out of Ray's fixed 30 s node-registration window on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import final_flow_run

from vlmforge.flows.run_names import name_of
from vlmforge.flows.runtime.embedded import QUIET_ENV, _free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
PREFECT = [sys.executable, "-m", "prefect", "--no-prompt"]
DEPLOYMENTS = {
    "vlmforge-run/nemotron-v3-full",
    "vlmforge-run/nemotron-v3-subset",
    "vlmforge-run/sample-release",
    "vlmforge-refresh/nemotron-v3-nightly-refresh",
    "vlmforge-mix/nemotron-v3-mix",
    "vlmforge-validate/nemotron-v3-validate",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A Prefect server of the module's own (its deployments, work pool and runs are what the tests read),
    shared by its tests: each registers the deployments again, as a user redeploying would."""
    tmp_path = tmp_path_factory.mktemp("deployments-server")
    port = _free_port()
    env = (
        os.environ.copy()
        | QUIET_ENV
        | {
            "PREFECT_HOME": str(tmp_path / "prefect-home"),
            "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
            "VLMFORGE_HOME": str(REPO),
        }
    )
    env.pop("RAY_ADDRESS", None)
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
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
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def ray_cluster(server: dict[str, str]) -> Iterator[str]:
    """A Ray head as its own process (retried if Ray's node start times out); yields its address."""
    from vlmforge.flows.runtime.ray_head import start_ray_head

    head = start_ray_head(num_cpus=2, env={"PREFECT_API_URL": server["PREFECT_API_URL"]})
    try:
        yield head.address
    finally:
        head.stop()


def _prefect(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    res = subprocess.run(
        [*PREFECT, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert res.returncode == 0, f"prefect {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def _run_deployment(env: dict[str, str], name: str, params: dict[str, Any]) -> tuple[str, str]:
    """Start a run of deployment ``name``, let one worker pass execute it; (flow run id, worker log)."""
    started = _prefect(env, "deployment", "run", name, "--params", json.dumps(params))
    flow_run_id = next(w for w in started.split() if len(w) == 36 and w.count("-") == 4)
    worker_log = _prefect(env, "worker", "start", "--pool", "vlmforge-local", "--run-once", timeout=900)
    return flow_run_id, worker_log


def test_deployments_register_and_run_through_a_worker(
    server: dict[str, str], ray_cluster: str, sample_release: Path, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
    )
    from prefect.settings import PREFECT_API_URL, temporary_settings

    env = server | {"RAY_ADDRESS": ray_cluster}  # the worker's flow runs inherit it
    _prefect(env, "work-pool", "create", "vlmforge-local", "--type", "process", "--overwrite")
    _prefect(env, "deploy", "--all", "--prefect-file", str(REPO / "prefect.yaml"))

    out = tmp_path / "out"
    subsets = ["photo_vqa", "video_qa"]
    run_params = {
        "cfg": {
            "out": str(out),
            "source": {"release": str(sample_release), "subsets": subsets},
            "gate": {"max_reject_rate": 0.9},
        }
    }
    run_id, run_log = _run_deployment(env, "vlmforge-run/sample-release", run_params)
    validate_id, validate_log = _run_deployment(
        env, "vlmforge-validate/nemotron-v3-validate", {"out": str(out), "workers": 0}
    )

    with (
        temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}),
        get_client(sync_client=True) as client,
    ):
        deployments = client.read_deployments()
        flows = {f.id: f.name for f in client.read_flows()}
        assert {f"{flows[d.flow_id]}/{d.name}" for d in deployments} >= DEPLOYMENTS
        nightly = next(d for d in deployments if d.name == "nemotron-v3-nightly-refresh")
        assert [getattr(s.schedule, "cron", None) for s in nightly.schedules] == ["0 3 * * *"]

        run = final_flow_run(client, run_id)
        assert run.state.is_completed(), f"{run.state}\n{run_log[-3000:]}"
        assert run.name == name_of(str(sample_release), str(out))  # release and output folder
        tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
        names = {t.name for t in tasks}
        # a task may hold several batches or subsets: "build a batch 0/2, b batch 0/1", "publish a, b"
        assert any(re.match(r"build (.+, )?photo_vqa batch \d+/\d+", n) for n in names), names
        for subset in ("photo_vqa", "video_qa"):
            assert any(
                n.startswith("publish ") and subset in n.split(" ", 1)[1].split(", ") for n in names
            ), names
        assert all(t.state and t.state.is_completed() for t in tasks), [
            (t.name, t.state) for t in tasks if not (t.state and t.state.is_completed())
        ]
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run.id]))
        )

        validated = final_flow_run(client, validate_id)
        assert validated.state.is_completed(), f"{validated.state}\n{validate_log[-3000:]}"
        assert validated.name == f"validate {out}"
        validate_artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[validated.id]))
        )

    assert artifacts and all(a.data for a in artifacts), artifacts
    summary = next(a for a in artifacts if a.key == "vlmforge-run-summary")
    assert "| photo_vqa |" in str(summary.data) and "| video_qa |" in str(summary.data)
    assert (out / "energon" / "metadataset.yaml").is_file(), summary.data
    report = str(next(a for a in validate_artifacts if a.key == "vlmforge-validate").data)
    assert "| photo_vqa | ok |" in report and "| video_qa | ok |" in report, report
    assert "0 failed" in report, report


def _take_terminal() -> None:  # in the child, after setsid: the pty on fd 0 becomes its controlling tty
    import fcntl
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def test_one_ctrl_c_stops_a_worker_and_cancels_its_flow_run(
    server: dict[str, str], ray_cluster: str, sample_release: Path, tmp_path: Path
) -> None:
    """``vlmforge worker`` on a terminal (issue 33): Ctrl-C, typed once its flow run is Running, stops the
    worker and the run, marks the run Cancelled, one line, exit 130 (a plain ``prefect worker start`` needed
    a second Ctrl-C and ended with SIGKILL, exit 137)."""
    import pty
    import threading

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    env = server | {"RAY_ADDRESS": ray_cluster}
    _prefect(env, "work-pool", "create", "vlmforge-local", "--type", "process", "--overwrite")
    _prefect(env, "deploy", "--all", "--prefect-file", str(REPO / "prefect.yaml"))
    params = {"cfg": {"out": str(tmp_path / "out"), "source": {"release": str(sample_release)}}}
    started = _prefect(
        env, "deployment", "run", "vlmforge-run/sample-release", "--params", json.dumps(params)
    )
    flow_run_id = next(w for w in started.split() if len(w) == 36 and w.count("-") == 4)

    master, slave = pty.openpty()
    screen = bytearray()

    def read_screen() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            screen.extend(chunk)

    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "worker", "--pool", "vlmforge-local"]
    proc = subprocess.Popen(
        cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO, start_new_session=True,
        preexec_fn=_take_terminal,
    )  # fmt: skip
    os.close(slave)
    reader = threading.Thread(target=read_screen, daemon=True)
    reader.start()
    try:
        with temporary_settings({PREFECT_API_URL: env["PREFECT_API_URL"]}), get_client(sync_client=True) as c:
            state = c.read_flow_run(flow_run_id).state
            while state is None or state.type.value != "RUNNING":  # the worker's run has started
                assert proc.poll() is None and not (state and state.is_final()), (
                    state,
                    bytes(screen)[-3000:],
                )
                time.sleep(1)
                state = c.read_flow_run(flow_run_id).state
            os.write(master, b"\x03")
            rc = proc.wait(timeout=300)
            run = final_flow_run(c, flow_run_id)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        reader.join(timeout=30)
        os.close(master)
    text = screen.decode(errors="replace")
    assert rc == 130, f"exit {rc}:\n{text[-4000:]}"
    stopped = [
        line for line in text.splitlines() if line.startswith("stopped (Ctrl-C): the worker is stopped")
    ]
    assert len(stopped) == 1 and "1 flow run(s) cancelled" in stopped[0], text[-4000:]
    assert "SIGKILL" not in text, text[-4000:]
    assert run.state.type.value == "CANCELLED", run.state
