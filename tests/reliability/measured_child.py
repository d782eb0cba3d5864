"""A ``vlmforge`` command in a child process, with its exit code, output, seconds and own peak RSS.

Linux counts the image a process replaced at exec in its ``ru_maxrss``: a child forked straight from a pytest
process that has grown to 1.3 GB reports 1.3 GB however little it uses itself. :data:`LAUNCHER` is small; the
command it forks starts from its few MB, and it hands back that child's own ``wait4`` figures on a pipe.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

LAUNCHER = """
import os, sys
report = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    os.close(report)
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
os.write(report, str(usage.ru_maxrss).encode())
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(
    args: list[str], log: Path, kill_after_s: float, env: Mapping[str, str] | None = None
) -> tuple[int, str, float, float]:
    """``vlmforge ARGS`` in its own session, output to ``log``: (exit code, output, seconds, peak RSS in MB of
    the command's own process). ``kill_after_s`` is a kill switch for a regression, not a timing assertion."""
    read_end, write_end = os.pipe()
    cmd = [sys.executable, "-c", LAUNCHER, str(write_end), "-m", "vlmforge.flows.cli", *args]
    t0 = time.monotonic()
    with log.open("wb") as handle:
        child = subprocess.Popen(
            cmd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            pass_fds=(write_end,),
            start_new_session=True,
        )
        os.close(write_end)
        killer = threading.Timer(kill_after_s, os.killpg, (child.pid, 9))
        killer.start()
        try:
            with os.fdopen(read_end, "rb") as report:
                peak_kb = report.read().decode()
            child.wait()
        finally:
            killer.cancel()
    seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    assert peak_kb, f"the launcher reported no figures:\n{text[-3000:]}"
    return child.returncode, text, seconds, int(peak_kb) / 1024
