"""One run per output folder (issue 33): a second run refuses, naming the first, or waits with --wait-lock;
the lock of a dead run is taken over; flow runs are named by release and output folder.

The holder here is this test process, through the same ``run_lock`` the CLI takes; the refused and the
waiting runs are the real ``vlmforge run``. The waiting run is released on its own "waiting for" line (an
event, not a clock) and then runs to the end, against the session's Prefect server, whose flow run it names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlmforge.flows.run_names import name_of
from vlmforge.flows.runtime.embedded import configured_api_url
from vlmforge.flows.runtime.run_lock import LOCK_NAME, run_lock

RUN_TIMEOUT_S = 900.0


def _text_release(root: Path) -> Path:
    sub = root / "release" / "chat"
    sub.mkdir(parents=True)
    (sub.parent / "README.md").write_text("# release\n\nLicense: CC-BY-4.0\n")
    (sub / "README.md").write_text("# chat\n\nLicense: CC-BY-4.0\n")
    turns = [{"role": "user", "content": "why?"}, {"role": "assistant", "content": "ok"}]
    rows = [{"id": f"r{i}", "messages": turns} for i in range(4)]
    (sub / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return sub.parent


def test_a_dead_runs_lock_is_taken_over(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(gone.stdout)
    (tmp_path / LOCK_NAME).write_text(
        json.dumps({"pid": dead_pid, "started": 0, "command": "vlmforge run x"})
    )
    said: list[str] = []
    with run_lock(str(tmp_path), say=said.append) as path:
        assert path is not None and json.loads(path.read_text())["pid"] == os.getpid()
    assert said == [f"lock: took over the lock of a run that is gone (pid {dead_pid}, started "
                    "1970-01-01 00:00:00 UTC: vlmforge run x)"]  # fmt: skip
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.slow
def test_a_second_run_refuses_or_waits(prefect_harness: None, tmp_path: Path) -> None:
    release, out = _text_release(tmp_path), tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "vlmforge.flows.cli",
        "run",
        str(release),
        "--out",
        str(out),
        "--executor",
        "local",
    ]
    env = os.environ.copy() | {"PREFECT_API_URL": str(configured_api_url()), "PYTHONUNBUFFERED": "1"}
    waiting: subprocess.Popen[str] | None = None
    with run_lock(str(out)):
        refused = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert refused.returncode == 2, refused.stderr
        busy = f"error: --out {out} is in use by another vlmforge run (pid {os.getpid()}, started "
        assert len(lines) == 1 and lines[0].startswith(busy), lines
        assert lines[0].endswith("; wait for it to end, or add --wait-lock to start when it does")

        waiting = subprocess.Popen(
            [*cmd, "--wait-lock"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert waiting.stdout is not None
        seen = []
        for line in waiting.stdout:  # the lock is released once the run says whom it waits for
            seen.append(line)
            if line.startswith("waiting for the run that holds"):
                assert f"(pid {os.getpid()}, started " in line
                break
        else:
            pytest.fail("".join(seen))
    rest, _ = waiting.communicate(timeout=RUN_TIMEOUT_S)
    assert waiting.returncode == 0, "".join(seen) + rest
    assert (out / "energon" / "metadataset.yaml").is_file() and not (out / LOCK_NAME).exists()

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        names = {r.name for r in client.read_flow_runs()}
    assert name_of(str(release), str(out)) in names, names
    assert name_of(str(release), str(out)).endswith(f" -> .../{out.parent.name}/out")
