"""``--ray-address`` to a cluster that refuses the driver (issue 43, item 6): a Ray head started without
token authentication, and a ``vlmforge run`` whose driver (token mode, no token) it cannot accept. The run
says so in one line and exits 2 before any flow run exists, so none is left Running; the cluster is left
alone. The run reports to the session's Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlmforge.flows.runtime.embedded import configured_api_url
from vlmforge.flows.runtime.ray_head import ray_head

pytestmark = pytest.mark.slow


def _flow_runs_since(t0: float) -> list[object]:
    import asyncio
    from datetime import UTC, datetime

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterStartTime

    since = datetime.fromtimestamp(t0, UTC)

    async def read() -> list[object]:
        async with get_client() as client:
            runs = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(start_time=FlowRunFilterStartTime(after_=since))
            )
            return [r for r in runs if r.name.startswith("run ")]

    return asyncio.run(read())


def test_a_cluster_that_refuses_the_driver_is_one_line_and_exit_2(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    with ray_head(num_cpus=1, env={"RAY_AUTH_MODE": "disabled"}) as head:
        env = os.environ.copy() | {"PREFECT_API_URL": str(configured_api_url()), "HOME": str(tmp_path)}
        for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS"):
            env.pop(name, None)  # the driver is in token mode (vlmforge's default) and has no token
        cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release)]
        cmd += ["--out", str(tmp_path / "out"), "--subset", "photo_vqa", "--ray-address", head.address]
        t0 = time.time()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert head.proc.poll() is None  # the cluster is left as it was
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr
    assert f"--ray-address {head.address}: Ray refused this driver" in errors[0]
    assert "RAY_AUTH_MODE=disabled" in errors[0] and "RAY_AUTH_TOKEN" in errors[0]
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 6, done.stderr
    assert _flow_runs_since(t0 - 1) == []  # refused before any flow run was made
    assert not (tmp_path / "out" / "energon").exists()
