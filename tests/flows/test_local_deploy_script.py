"""``infra/local-deploy.sh`` serves the deployments with ``vlmforge worker`` (README's recommendation: one
Ctrl-C cancels its runs), not a plain ``prefect worker start``; the command it runs exists as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "infra" / "local-deploy.sh"


def test_local_deploy_starts_vlmforge_worker() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    last = [line for line in SCRIPT.read_text().splitlines() if line.startswith("exec ")]
    assert len(last) == 1 and "vlmforge.flows.cli worker --pool vlmforge-local" in last[0], last
    assert 'prefect[@]}" worker' not in SCRIPT.read_text()
    helped = subprocess.run(
        [sys.executable, "-m", "vlmforge.flows.cli", "worker", "--help"], capture_output=True, text=True
    )
    assert helped.returncode == 0 and "--pool" in helped.stdout
