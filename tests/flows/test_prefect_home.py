"""A Prefect home per project (issue 43, item 4): runs and ``vlmforge server`` started in one folder keep
their records in that folder's ``.vlmforge/prefect``, not in ``~/.prefect``, and see no other project's runs.

The real CLI, as a user runs it, with neither ``PREFECT_API_URL`` nor ``PREFECT_HOME`` set. Project A runs
``vlmforge server`` and two runs at once (they report to that server: one server on A's database, so no
``database is locked``); project B runs once, with a server of its own that stops with the run. A's server
lists A's two runs only; B's database holds B's run only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow
TIMEOUT_S = 600.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _user_env(tmp_path: Path, cache: Path) -> dict[str, str]:
    """A user's environment: no Prefect API nor home given; HOME a scratch folder (where ~/.prefect would
    be), the template cache shared by the session's tests."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    return env | {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(cache), "PYTHONUNBUFFERED": "1"}


def _runs_of(api: str) -> list[dict[str, Any]]:
    req = urllib.request.Request(
        f"{api}/flow_runs/filter",
        data=json.dumps({"sort": "START_TIME_DESC", "limit": 50}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return [r for r in json.loads(resp.read()) if r["name"].startswith("run ")]


def _wait_healthy(api: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + TIMEOUT_S  # a bound on a server that never answers, not a timing
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.25)
    raise AssertionError(f"vlmforge server did not answer (exit {proc.poll()})")


def _run(release: Path, project: Path, name: str, env: dict[str, str]) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release), "--out", str(project / name)]
    cmd += ["--executor", "local", "--max-reject-rate", "0.9", "--subset", "photo_vqa"]
    return subprocess.Popen(
        cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_each_project_keeps_its_own_runs_in_its_own_home(
    sample_release: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cache = tmp_path_factory.getbasetemp() / "prefect-template-cache"
    env = _user_env(tmp_path, cache)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    server = subprocess.Popen(
        [sys.executable, "-m", "vlmforge.flows.cli", "server", "--port", str(port)],
        cwd=a,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,
    )
    try:
        _wait_healthy(api, server)
        t0 = dt.datetime.now(dt.UTC)
        runs_a = [_run(sample_release, a, name, env) for name in ("out1", "out2")]  # at once, one home
        run_b = _run(sample_release, b, "out", env)
        logs = {}
        for key, proc in (("a1", runs_a[0]), ("a2", runs_a[1]), ("b", run_b)):
            logs[key] = proc.communicate(timeout=TIMEOUT_S)[0]
            assert proc.returncode == 0, logs[key][-4000:]
        for key in ("a1", "a2"):
            assert f"Prefect: reporting to this project's server at {api}" in logs[key], logs[key][-3000:]
        assert "Prefect: starting a server on 127.0.0.1 for the Prefect home" in logs["b"]
        assert f"records are kept in the Prefect home {b / '.vlmforge' / 'prefect'}" in logs["b"]

        listed = _runs_of(api)
        assert len(listed) == 2, [r["name"] for r in listed]
        assert all(dt.datetime.fromisoformat(r["created"]) >= t0 - dt.timedelta(seconds=5) for r in listed)
    finally:
        os.killpg(server.pid, signal.SIGINT)  # Ctrl-C at its terminal
        server_log = server.communicate(timeout=120)[0].decode(errors="replace")
    assert "database is locked" not in server_log, server_log[-3000:]
    assert not (a / ".vlmforge" / "prefect" / "vlmforge-server.json").exists()  # no server serves A now

    with sqlite3.connect(b / ".vlmforge" / "prefect" / "prefect.db") as db:
        names_b = [n for (n,) in db.execute("SELECT name FROM flow_run") if n.startswith("run ")]
    assert len(names_b) == 1 and names_b[0] not in {r["name"] for r in listed}
    assert (a / ".vlmforge" / "prefect" / "prefect.db").is_file()
    assert not (tmp_path / "home" / ".prefect" / "prefect.db").exists()  # not the user's shared home
    assert not (b / ".vlmforge" / "prefect" / "vlmforge-server.json").exists()  # B's server stopped
