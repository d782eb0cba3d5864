"""``vlmforge worker --pool NAME``: ``prefect worker start`` that one Ctrl-C stops cleanly.

A plain ``prefect worker start`` shares the terminal with the flow runs it starts: Ctrl-C reached the worker
and every flow run at once, the worker waited for runs that were crashing, needed a second Ctrl-C and ended
with ``Sending SIGKILL`` (exit 137), the runs Crashed or Running in the UI. Here the worker runs in a process
group of its own, so the terminal's signal reaches only this command, which then, in order: stops the flow
runs the worker is executing (SIGTERM, their own Ray with them; batches in flight are abandoned as a kill
leaves them and the next run resumes), marks them Cancelled in Prefect, stops the worker, prints one line and
exits ``128 + signal`` (130 for Ctrl-C). SIGTERM does the same.

Registered on the main app by ``flows/cli/__init__.py``.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from typing import Annotated

import typer

FLOW_RUN_ENV = "PREFECT__FLOW_RUN_ID"  # how a process worker tells a flow-run process which run it is


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    pool: Annotated[str, typer.Option("--pool", "-p", help="work pool to take flow runs from")],
    work_queue: Annotated[
        list[str] | None, typer.Option("--work-queue", "-q", help="only this queue (repeatable)")
    ] = None,
    run_once: Annotated[bool, typer.Option(help="take the scheduled runs once, then exit")] = False,
) -> None:
    """Run a Prefect worker for the pool until Ctrl-C, which cancels the flow runs it is executing."""
    from rich.console import Console

    from ..runtime.embedded import apply_quiet_env

    apply_quiet_env()
    cmd = [sys.executable, "-m", "prefect", "worker", "start", "--pool", pool]
    cmd += [a for q in work_queue or () for a in ("--work-queue", q)]
    cmd += ["--run-once"] if run_once else []
    asked = threading.Event()
    signums: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        signums.append(signum)
        asked.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc = subprocess.Popen(cmd, process_group=0)  # the terminal's Ctrl-C is this command's alone
        while proc.poll() is None and not asked.wait(0.5):
            pass
        if not asked.is_set():
            raise typer.Exit(proc.returncode)
        cancelled = stop_flow_runs(proc.pid)
        _stop(proc)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    how = "Ctrl-C" if signums[0] == signal.SIGINT else "SIGTERM"
    runs = f"{len(cancelled)} flow run(s) cancelled" if cancelled else "no flow run was running"
    again = " ".join(["vlmforge", *sys.argv[1:]])
    Console(stderr=True).print(
        f"stopped ({how}): the worker is stopped, {runs} (their committed batches are kept: run them again "
        f"to resume); start it again with: {again}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    raise typer.Exit(128 + signums[0])


def stop_flow_runs(worker_pid: int, timeout_s: float = 60.0) -> list[str]:
    """SIGTERM the flow-run processes the worker ``worker_pid`` started, wait for them (SIGKILL after
    ``timeout_s``), then mark their flow runs Cancelled; returns their ids."""
    import psutil

    from ..runtime.interrupt import mark_cancelled

    runs: dict[str, psutil.Process] = {}
    for child in psutil.Process(worker_pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            run_id = child.environ().get(FLOW_RUN_ENV)
            if run_id and run_id not in runs:
                runs[run_id] = child
    for proc in runs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(runs.values()), timeout=timeout_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    for run_id in runs:
        with contextlib.suppress(Exception):  # the API unreachable: the worker's own report stands
            mark_cancelled(run_id)
    return list(runs)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
