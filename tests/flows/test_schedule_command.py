"""The documented schedule command runs as written (issue 43, item 7): prefect.yaml's deployments registered
on the session's Prefect server with ``prefect deploy``, then the command infra/README.md and prefect.yaml
give, word for word, resumes the nightly refresh's schedule and no other (``prefect deployment schedule
resume NAME --all``, documented before, was refused by Prefect)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vlmforge.flows.runtime.embedded import QUIET_ENV, configured_api_url

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"`(vlmforge schedule resume [^`]+)`")


def _documented() -> str:
    found = {
        m for doc in ("infra/README.md", "prefect.yaml") for m in COMMAND.findall((REPO / doc).read_text())
    }
    assert len(found) == 1, found  # both documents give the same command
    return found.pop()


def _run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def _active(env: dict[str, str]) -> dict[str, list[bool]]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flows = {f.id: f.name for f in client.read_flows()}
        return {
            f"{flows[d.flow_id]}/{d.name}": [s.active for s in d.schedules] for d in client.read_deployments()
        }


def test_the_documented_schedule_command_resumes_the_nightly_refresh(prefect_harness: None) -> None:
    env = (
        os.environ.copy()
        | QUIET_ENV
        | {"PREFECT_API_URL": str(configured_api_url()), "VLMFORGE_HOME": str(REPO)}
    )
    prefect = [sys.executable, "-m", "prefect", "--no-prompt"]
    _run(env, *prefect, "work-pool", "create", "vlmforge-local", "--type", "process", "--overwrite")
    _run(env, *prefect, "deploy", "--all", "--prefect-file", str(REPO / "prefect.yaml"))
    before = _active(env)
    nightly = "vlmforge-refresh/nemotron-v3-nightly-refresh"
    assert before[nightly] == [False]  # ships paused

    words = shlex.split(_documented())
    assert words[0] == "vlmforge"
    said = _run(env, sys.executable, "-m", "vlmforge.flows.cli", *words[1:])
    after = _active(env)
    assert after[nightly] == [True], said
    assert {k: v for k, v in after.items() if k != nightly} == {
        k: v for k, v in before.items() if k != nightly
    }
    assert said.startswith(f"resumed: {nightly} schedule ")

    _run(env, sys.executable, "-m", "vlmforge.flows.cli", "schedule", "pause", nightly)
    assert _active(env)[nightly] == [False]
    refused = subprocess.run(
        [sys.executable, "-m", "vlmforge.flows.cli", "schedule", "resume", "vlmforge-refresh/no-such"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2 and refused.stderr.startswith("error: no deployment"), refused.stderr
