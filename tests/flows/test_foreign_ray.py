"""A Ray that someone else started on the machine does not capture a run (issue 33).

After a plain ``ray start --head`` (an ML workstation often has one), ``ray.init()`` without an address
connects to it through the ``ray_current_cluster`` file that ``ray start`` writes, and a run that passed its
own CPUs failed with ``ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be
provided.``. The other head here is started as ``ray start`` would be on a workstation, on loopback, with
its own temp dir (the run sees it through ``RAY_TMPDIR``, the way it would see ``/tmp/ray``), its own token
and a HOME holding the bootstrap config; the real CLI then runs the sample release to the end with a Ray of
its own, says so in its first lines, and the other head is still up afterwards, untouched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vlmforge.flows.runtime.embedded import RAY_BOOTSTRAP, configured_api_url
from vlmforge.flows.runtime.ray_head import RayHead, _free_port, _port_open, _ray_cli

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0


@pytest.fixture
def foreign_head() -> Iterator[tuple[RayHead, Path]]:
    """``ray start --head --block`` of "another user": its own token, temp dir and HOME; returns the head and
    the RAY_TMPDIR under which its ``ray/ray_current_cluster`` lies."""
    tmp_root = Path(tempfile.mkdtemp(prefix="vfo-", dir="/tmp"))  # short: Ray's socket paths are limited
    home = tmp_root / "home"
    home.mkdir()
    bootstrap = Path("/work/shared/ray/ray_bootstrap_config.yaml")
    (home / "ray_bootstrap_config.yaml").write_text(
        bootstrap.read_text() if bootstrap.is_file() else RAY_BOOTSTRAP
    )
    temp_dir = tmp_root / "ray"
    port = _free_port()
    log = tmp_root / "ray-start.log"
    env = os.environ.copy() | {
        "HOME": str(home),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),  # not the run's token: it could not even join
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    for k in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):
        env.pop(k, None)
    cmd = [
        *_ray_cli(),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        f"--port={port}",
        "--num-cpus=1",
        "--object-store-memory=100000000",
        f"--temp-dir={temp_dir}",
    ]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    head = RayHead(f"127.0.0.1:{port}", home, temp_dir, log, proc)
    try:
        address_file = temp_dir / "ray_current_cluster"
        while not (address_file.is_file() and _port_open(port)):  # ray start writes it once it is up
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield head, tmp_root
    finally:
        head.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)


def test_a_run_starts_its_own_ray_beside_another(
    prefect_harness: None, sample_release: Path, tmp_path: Path, foreign_head: tuple[RayHead, Path]
) -> None:
    head, ray_tmpdir = foreign_head
    out = tmp_path / "out"
    env = os.environ.copy() | {
        "RAY_TMPDIR": str(ray_tmpdir),  # where ray.init() looks for the last `ray start`
        "PREFECT_API_URL": str(configured_api_url()),
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release), "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    text = done.stdout + done.stderr
    assert done.returncode in (0, 1), text[-4000:]  # 1: the sample release holds a subset meant to fail
    assert "must not be provided" not in text and "Traceback" not in text, text[-4000:]
    first = [line for line in done.stderr.splitlines() if line.strip()][:2]
    assert first[0].startswith("Ray: starting its own on 127.0.0.1"), first
    assert f"not the Ray at {head.address}" in first[0], first
    assert (out / "energon" / "metadataset.yaml").is_file(), text[-4000:]
    assert head.proc.poll() is None and (ray_tmpdir / "ray" / "ray_current_cluster").is_file()
