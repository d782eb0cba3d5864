"""Nothing a run starts listens beyond loopback, Ray's own servers included.

A real ``vlmforge run`` of the sample release (embedded Prefect server and embedded Ray, as a new user runs
it) in a session of its own, with the test-only watch hook of ``flows/runtime/faults.py``: at each of the
run's stage events (Prefect API up, Ray up, every batch, gate, publish and validation) the driver pauses until
this test has listed the listening TCP sockets of the run's whole process tree (children of children, and
every process of its session) with psutil. Any socket bound beyond loopback fails the test; so does a scan
that never saw Ray's own listeners (GCS, raylet, a worker), which would make the check vacuous.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from stage_events import StageEvents

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
RAY_DASHBOARD_PORT = 8265


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str
    ip: str
    port: int


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1, an IPv6 socket bound to IPv4 loopback
    return addr.is_loopback


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


def _label(proc: psutil.Process) -> str:
    cmd = proc.cmdline()
    first = Path(cmd[0]).name if cmd else proc.name()
    return cmd[0] if first.startswith("ray::") else " ".join([first, *cmd[1:]])[:200]


def listeners(root: int) -> set[Listener]:
    found = set()
    for proc in process_tree(root):
        try:
            conns = proc.net_connections(kind="inet")
            label = _label(proc)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue  # ended between the listing and the look
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                found.add(Listener(proc.pid, label, c.laddr.ip, c.laddr.port))
    return found


def test_an_embedded_run_listens_on_loopback_only(sample_release: Path, tmp_path: Path) -> None:
    out, log = tmp_path / "out", tmp_path / "run.log"
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release), "--out", str(out)]
    cmd += ["--subset", "photo_vqa", "--batch-lines", "2"]
    seen: set[Listener] = set()
    run: subprocess.Popen[bytes] | None = None

    def scan(event: str) -> None:  # the run is paused at ``event`` while this runs
        assert run is not None
        seen.update(listeners(run.pid))

    with StageEvents(scan) as events, log.open("wb") as handle:
        env = os.environ.copy() | events.env | {"PYTHONUNBUFFERED": "1"}
        env.pop("PREFECT_API_URL", None)  # the run starts its own Prefect server, as a new user's run does
        run = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = run.wait(timeout=RUN_TIMEOUT_S)
        finally:
            for proc in process_tree(run.pid) if run.poll() is None else []:
                proc.kill()
    print("events:", events.seen)
    for item in sorted(seen, key=lambda x: (x.process, x.port)):
        print(f"{item.ip}:{item.port}  {item.process}")
    assert rc == 0, log.read_text(errors="replace")[-4000:]
    assert not events.errors, events.errors
    exposed = sorted(f"{x.ip}:{x.port} {x.process}" for x in seen if not is_loopback(x.ip))
    assert exposed == [], f"listening beyond loopback: {exposed}"
    # The scans saw the whole run: its stages, and Ray's and Prefect's own servers.
    assert {"startup:1", "startup:2", "batches:1", "publish:1", "validate:1"} <= set(events.seen), events.seen
    names = {x.process for x in seen}
    assert any(n.startswith("gcs_server") for n in names), names
    assert any(n.startswith("raylet") for n in names), names
    assert any(n.startswith("ray::") for n in names), names  # a worker's or an agent's gRPC server
    assert any("prefect" in n for n in names), names
    # no Ray dashboard web UI (the run's one Prefect server takes a free ephemeral port, never 8265)
    assert not [x for x in seen if x.port == RAY_DASHBOARD_PORT], seen
