"""A run's start-up starts each service once: one Prefect server for the whole run, the driver included.

Prefect reads its settings when it is imported, so a driver that only put ``PREFECT_API_URL`` in the
environment after the import kept seeing no API and started a temporary server of its own next to the one the
run had started (the Ray workers used the first, the driver the second). A real ``vlmforge run`` of a small
text-only release, in a session of its own, with the test-only watch hook of ``flows/runtime/faults.py``: at
each stage event (Prefect API up, Ray up, every batch, gate, publish, validation) the run is paused while this
test lists its whole process tree; every scan must see exactly one Prefect server, always the same, and while
batches run, Ray's processes must see the environment a local Ray is started with.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from reliability.stage_events import StageEvents

from vlmforge.flows.runtime.embedded import RAY_PROCESS_ENV

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
# `prefect server start` (the run's own server) and Prefect's temporary server (SubprocessASGIServer)
SERVER_MARKS = ("prefect server start", "prefect.server.api.server:create_app")


def _text_release(root: Path, lines: int) -> Path:
    sub = root / "release" / "chat"
    sub.mkdir(parents=True)
    (sub.parent / "README.md").write_text("# release\n\nLicense: CC-BY-4.0\n")
    (sub / "README.md").write_text("# chat\n\nLicense: CC-BY-4.0\n")
    rows = [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": f"{i} + {i}?"},
                {"role": "assistant", "content": str(2 * i)},
            ],
        }
        for i in range(lines)
    ]
    (sub / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return sub.parent


def process_tree(root: int) -> list[psutil.Process]:
    """``root``, every descendant, and every other process of the session ``root`` leads."""
    procs = {root: psutil.Process(root)}
    procs |= {p.pid: p for p in procs[root].children(recursive=True)}
    for pid in psutil.pids():
        try:
            if pid not in procs and os.getsid(pid) == root:
                procs[pid] = psutil.Process(pid)
        except (OSError, psutil.Error):
            continue
    return list(procs.values())


def prefect_servers(root: int) -> set[int]:
    """Pids of Prefect API servers in the process tree (and session) of ``root``."""
    found = set()
    for proc in process_tree(root):
        try:
            cmd = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if any(mark in cmd for mark in SERVER_MARKS):
            found.add(proc.pid)
    return found


def ray_process_settings(root: int) -> list[tuple[str, bool, dict[str, str | None]]]:
    """For each Ray process of the tree (GCS, raylet, ``ray::`` workers and agents): its name, whether its
    HOME holds ``ray_bootstrap_config.yaml``, and its allocator settings (``RAY_PROCESS_ENV``). Ray's agents
    write their title over their environment block, so theirs reads empty; they inherit the raylet's."""
    found = []
    for proc in process_tree(root):
        try:
            cmd, env = proc.cmdline(), proc.environ()
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        name = cmd[0] if cmd and cmd[0].startswith("ray::") else Path(cmd[0]).name if cmd else ""
        if env and (name.startswith("ray::") or name in ("raylet", "gcs_server")):
            home = Path(env.get("HOME", "/nonexistent"))
            allocators = {k: env.get(k) for k in RAY_PROCESS_ENV}
            found.append((name, (home / "ray_bootstrap_config.yaml").is_file(), allocators))
    return found


def test_an_embedded_run_starts_one_prefect_server(tmp_path: Path) -> None:
    release, out, log = _text_release(tmp_path, 10), tmp_path / "out", tmp_path / "run.log"
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release), "--out", str(out)]
    scans: dict[str, set[int]] = {}
    ray_processes: list[tuple[str, bool, dict[str, str | None]]] = []
    commands: list[str] = []
    run: subprocess.Popen[bytes] | None = None

    def scan(event: str) -> None:  # the run is paused at ``event`` while this runs
        assert run is not None
        scans[event] = prefect_servers(run.pid)
        if event.startswith("batches"):
            ray_processes.extend(ray_process_settings(run.pid))
            for proc in process_tree(run.pid):
                with contextlib.suppress(psutil.Error):
                    commands.append(" ".join(proc.cmdline()))

    with StageEvents(scan) as events, log.open("wb") as handle:
        env = os.environ.copy() | events.env | {"PYTHONUNBUFFERED": "1"}
        env.pop("PREFECT_API_URL", None)  # the run starts its own Prefect server, as a new user's run does
        run = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = run.wait(timeout=RUN_TIMEOUT_S)
        finally:
            for proc in process_tree(run.pid) if run.poll() is None else []:
                proc.kill()
    text = log.read_text(errors="replace")
    assert rc == 0, text[-4000:]
    assert not events.errors, events.errors
    assert {"startup:1", "startup:2", "batches:1", "publish:1"} <= set(scans), sorted(scans)
    assert "Starting temporary server" not in text, text[-4000:]
    # the run's logs reach its server before the server stops (queued ones used to retry a stopped server
    # for up to ~100 s after the run had finished, then print this)
    assert "Error logging to API" not in text, text[-4000:]
    counts = {event: len(pids) for event, pids in scans.items()}
    assert set(counts.values()) == {1}, counts  # exactly one server at every point of the run
    assert len(set().union(*scans.values())) == 1, scans  # and the same one throughout
    # Ray's processes (a batch's worker among them) see the HOME with Ray's bootstrap file, so no start probes
    # cloud metadata, two malloc arenas and Arrow on glibc's heap (flows/runtime/embedded.py RAY_PROCESS_ENV)
    assert {"raylet", "gcs_server", "ray::build-batch"} <= {name for name, _, _ in ray_processes}, (
        ray_processes
    )
    assert all(home_ok and env == RAY_PROCESS_ENV for _, home_ok, env in ray_processes), ray_processes
    # the run's one-node Ray has no autoscaler monitor and no log monitor (flows/runtime/embedded.py
    # _without_cluster_monitors): ~0.17 GB of idle processes
    assert any("raylet" in c for c in commands), commands
    monitors = [c for c in commands if "autoscaler/_private/monitor.py" in c or "log_monitor.py" in c]
    assert not monitors, monitors
