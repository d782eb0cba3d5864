"""The embedded runtime: a Prefect API and a Ray cluster for one run, started only when none is configured.

Defaults start everything on loopback with telemetry off: a Prefect server subprocess on 127.0.0.1 (so
Ray workers share one API instead of each starting an ephemeral server) and a local Ray head bound to
127.0.0.1 without a dashboard, whose processes see a HOME holding ``ray_bootstrap_config.yaml`` (without it
every Ray start probes cloud metadata addresses). ``PREFECT_API_URL`` and ``--ray-address``/``RAY_ADDRESS``
switch to existing services with the same code path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# Set before anything imports Ray, Prefect or Great Expectations.
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "GX_ANALYTICS_ENABLED": "False",
    "AWS_EC2_METADATA_DISABLED": "true",
}

RAY_BOOTSTRAP = "cluster_name: vlmforge-local\nprovider:\n  type: local\n"


def apply_quiet_env() -> None:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configured_api_url() -> str | None:
    """The Prefect API URL from the environment or the active Prefect settings (test harness, profile)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


@contextlib.contextmanager
def prefect_api(startup_timeout_s: float = 180.0) -> Iterator[str]:
    """Yield a Prefect API URL; start a loopback server subprocess when none is configured."""
    url = configured_api_url()
    if url:
        os.environ["PREFECT_API_URL"] = url  # Ray workers inherit it
        yield url
        return
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    log_path = Path(tempfile.mkdtemp(prefix="vlmforge-prefect-")) / "server.log"
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"Prefect server did not start on 127.0.0.1:{port}:\n{tail}") from None
                time.sleep(0.5)
        os.environ["PREFECT_API_URL"] = url
        yield url
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(log_path.parent, ignore_errors=True)


@contextlib.contextmanager
def ray_cluster(address: str | None = None, num_cpus: int | None = None) -> Iterator[str | None]:
    """Connect to ``address`` (or ``RAY_ADDRESS``), reuse an initialised Ray, or start a loopback one."""
    import ray

    if ray.is_initialized():
        yield None
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, log_to_driver=False)
        try:
            yield address
        finally:
            ray.shutdown()
        return
    home = Path(tempfile.mkdtemp(prefix="vlmforge-ray-home-"))
    (home / "ray_bootstrap_config.yaml").write_text(RAY_BOOTSTRAP)
    cpus = num_cpus or os.cpu_count() or 1
    # Ray's processes inherit the environment at start: swap HOME only around the start.
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            num_cpus=cpus,
            object_store_memory=256 * 1024**2,
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
    try:
        yield None
    finally:
        ray.shutdown()
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def embedded_runtime(ray_address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Prefect API first (Ray workers must inherit its URL), then Ray."""
    apply_quiet_env()
    with prefect_api(), ray_cluster(ray_address, num_cpus):
        yield
