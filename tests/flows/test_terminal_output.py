"""What a piped ``vlmforge run`` prints at 80 columns (CI, a log file): plain progress lines as the run
goes (per-subset batches, rows/s, images/s, ETA, stage starts) and a summary table that fits, headers whole,
with the process's wall time (issue 33). The live view on a terminal is checked by test_interrupt.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vlmforge.flows.runtime.embedded import configured_api_url

pytestmark = pytest.mark.slow
HEADER = re.compile(r"^\s*subset\s+license\s+rows\s+ok\s+rej\s+drop\s+img\s+vid\s+tokens\s+gate\s*$")


def test_a_piped_run_prints_progress_lines_and_an_80_column_summary(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release), "--out", str(out)]
    cmd += ["--subset", "photo_vqa", "--batch-lines", "2", "--executor", "local"]
    env = os.environ.copy() | {"PREFECT_API_URL": str(configured_api_url()), "COLUMNS": "80"}
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    err = done.stderr.splitlines()

    plan = next(line for line in err if line.startswith("batches: "))
    assert re.fullmatch(r"batches: (\d+) over 1 subsets \(\d+ rows\)", plan), plan
    total = int(plan.split()[1])
    last = [line for line in err if line.startswith(f"photo_vqa {total}/{total} · ")]
    assert len(last) == 1, err
    assert re.search(r" · batches \d+/\d+ · [\d.,]+ rows/s · [\d.,]+ images/s · ETA ", last[0]), last
    order = [line for line in err if line in ("gate: started", "photo_vqa: gate", "photo_vqa: done")]
    assert order == ["gate: started", "photo_vqa: gate", "photo_vqa: done"], err
    # the links that outlive the run: its Data Docs (no docs server serves OUT here: the file and how to
    # serve it); the Prefect server it reported to keeps its page, so no "own server stopped" line
    docs = [line for line in err if line.startswith("Data Docs: ")]
    assert len(docs) == 1 and f"serve them over http: vlmforge server --docs {out}" in docs[0], err
    assert not any(line.startswith("Prefect: the run's own server stopped") for line in err), err

    table = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    assert any(HEADER.match(line) for line in table), "\n".join(table)
    assert any(line.lstrip().startswith("photo_vqa ") for line in table), "\n".join(table)
    wall = float(re.search(r"\(([\d.]+) s wall\)", done.stdout).group(1))  # type: ignore[union-attr]
    record = json.loads(next((out / "runs").glob("*.json")).read_text())
    assert record["summary"]["seconds"] < wall <= elapsed  # the flow's time < the process's <= measured
