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
from typing import Any

from prefect_ray import RayTaskRunner

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


def start_local_ray(num_cpus: int | None = None) -> Path:
    """Start a local Ray head on 127.0.0.1 without dashboard; returns the HOME its processes see."""
    import ray

    home = Path(tempfile.mkdtemp(prefix="vlmforge-ray-home-"))
    (home / "ray_bootstrap_config.yaml").write_text(RAY_BOOTSTRAP)
    # Ray's processes inherit the environment at start: swap HOME only around the start.
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        ray.init(
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            num_cpus=num_cpus or os.cpu_count() or 1,
            object_store_memory=256 * 1024**2,
            log_to_driver=False,
            configure_logging=False,
            namespace="prefect",
        )
    finally:
        if old_home is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old_home
    return home


class LoopbackRayTaskRunner(RayTaskRunner):
    """prefect-ray's runner, but a Ray it starts itself is the loopback, probe-free one of start_local_ray.

    With an address (argument or ``RAY_ADDRESS``) it connects as prefect-ray does; an already initialised Ray
    is reused. The flow carries this runner, so a CLI run and a deployment run by a worker behave the same.
    """

    def __init__(
        self,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        num_cpus: int | None = None,
    ) -> None:
        super().__init__(address=address, init_kwargs=init_kwargs)
        self.num_cpus = num_cpus
        self._local_home: Path | None = None

    def duplicate(self) -> LoopbackRayTaskRunner:
        return type(self)(address=self.address, init_kwargs=self.init_kwargs, num_cpus=self.num_cpus)

    def __enter__(self) -> LoopbackRayTaskRunner:
        import ray

        apply_quiet_env()
        if not ray.is_initialized() and not (self.address or os.environ.get("RAY_ADDRESS")):
            self._local_home = start_local_ray(self.num_cpus)
        super().__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            super().__exit__(*exc_info)
        finally:
            if self._local_home is not None:
                import ray

                ray.shutdown()
                shutil.rmtree(self._local_home, ignore_errors=True)
                self._local_home = None


@contextlib.contextmanager
def embedded_runtime() -> Iterator[str]:
    """A Prefect API for the run; Ray is started by the flow's task runner (Ray workers inherit the URL)."""
    apply_quiet_env()
    with prefect_api() as url:
        yield url
