"""Ctrl-C twice leaves no process of the run behind and no flow run Running (issue 43, item 5).

The real ``vlmforge run`` on a pseudo-terminal, as a user's shell runs it, with no Prefect API given: it
starts its project's Prefect server (the subject here, with Ray's processes in the ``ray`` case). At its
first committed batch (the stage event ``batches:1``) the test types Ctrl-C; once the run has said it is
stopping, Ctrl-C again. The driver must exit 130 and every process of its tree (its descendants and its
session's members, seen while it ran) be gone within 10 s; the flow run, read from the project's Prefect
database afterwards (its server is gone too), is Cancelled or Crashed.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import psutil
import pytest
from on_terminal import Terminal, on_terminal

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
STOPPING = b"Ctrl-C again stops it at once"


def _tree(pid: int) -> list[psutil.Process]:
    """The processes of the run: ``pid``'s descendants and the members of its session."""
    found = {}
    with_children = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    for proc in with_children:
        found[proc.pid] = proc
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pid:
                found.setdefault(proc.pid, proc)
        except (OSError, psutil.Error):
            continue
    found.pop(pid, None)
    return list(found.values())


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_ctrl_c_twice_leaves_no_process_and_no_run_running(
    executor: str, sample_release: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "vlmforge.flows.cli",
        "run",
        str(sample_release),
        "--out",
        str(project / "out"),
    ]
    cmd += ["--batch-lines", "2", "--executor", executor]
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_HOME")}
    env |= {
        "HOME": str(tmp_path / "home"),  # nothing of the run in the user's ~/.prefect
        "XDG_CACHE_HOME": str(tmp_path_factory.getbasetemp() / "prefect-template-cache"),
        "PYTHONUNBUFFERED": "1",
    }
    pressed: list[int] = []
    seen: dict[int, psutil.Process] = {}
    commands: dict[int, str] = {}

    def snapshot(pid: int) -> None:
        for p in _tree(pid):
            try:
                commands[p.pid] = " ".join(p.cmdline())
            except psutil.Error:
                continue
            seen[p.pid] = p

    def ctrl_c_twice(term: Terminal, event: str) -> None:  # the run is paused at its first committed batch
        if event != "batches:1" or pressed:
            return
        snapshot(term.pid)
        term.type(b"\x03")
        pressed.append(1)
        assert term.wait_for(STOPPING, 120), "the run never said it was stopping"
        snapshot(term.pid)
        term.type(b"\x03")
        pressed.append(2)

    with on_terminal(cmd, env, ctrl_c_twice, cwd=project) as term:
        try:
            rc = term.wait(RUN_TIMEOUT_S)
            left = [p for p in seen.values() if p.is_running()]
            _, alive = psutil.wait_procs(left, timeout=10)  # returns as soon as they are all gone
        finally:
            for p in [*seen.values()]:
                if p.is_running():
                    p.kill()
    text, events = term.text, term.events
    assert events is not None
    assert pressed == [1, 2], f"Ctrl-C pressed {len(pressed)} time(s):\n{text[-4000:]}"
    assert events.errors == []
    assert rc == 130, f"exit {rc}:\n{text[-4000:]}"
    assert "stopping at once (second Ctrl-C)" in text, text[-4000:]
    assert not alive, [(p.pid, commands.get(p.pid)) for p in alive]
    assert any("prefect server start" in c for c in commands.values()), commands  # the run's own server
    if executor == "ray":
        assert any("raylet" in c for c in commands.values()), f"the test saw no Ray process: {commands}"

    with sqlite3.connect(project / ".vlmforge" / "prefect" / "prefect.db") as db:
        states = [s for n, s in db.execute("SELECT name, state_type FROM flow_run") if n.startswith("run ")]
    assert states in (["CANCELLED"], ["CRASHED"]), states
