"""A Ray head as its own process (``ray start --head --block``): what ``vlmforge server --ray``, a
deployment's worker and the tests run flows on, as a cluster would. Bound to 127.0.0.1,
token-authenticated, no dashboard web UI."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .embedded import QUIET_ENV, RAY_BOOTSTRAP, _free_port, ray_process_env, ray_token_path


@dataclass
class RayHead:
    """A Ray head started by :func:`start_ray_head`; :meth:`stop` ends exactly its processes."""

    address: str  # 127.0.0.1:<port>, for ray.init / RAY_ADDRESS / --ray-address
    home: Path  # the HOME its processes see (holds ray_bootstrap_config.yaml)
    temp_dir: Path  # Ray's session folder root (logs under session_latest/logs)
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def logs(self) -> Path:
        return self.temp_dir / "session_latest" / "logs"

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM the blocking ``ray start`` (it stops its node), then its own process group if needed."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of this head only (its own session)
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _ray_cli() -> list[str]:
    exe = Path(sys.executable).with_name("ray")
    return (
        [str(exe)]
        if exe.is_file()
        else [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
    )


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_ray_head(
    *,
    num_cpus: int | None = None,
    object_store_memory: int = 256 * 1024**2,
    env: Mapping[str, str] | None = None,
    attempts: int = 3,
    startup_timeout_s: float = 180.0,
) -> RayHead:
    """Start ``ray start --head --block`` on 127.0.0.1 (no dashboard, telemetry off) as its own process.

    Ray gives a starting node 30 s to register (hard-coded); on a loaded machine that can run out, so a
    failed start is retried on a fresh port. ``env`` adds to the environment its processes (and so the
    tasks) see, e.g. ``PREFECT_API_URL``.
    """
    ray_token_path()  # the head runs in token mode (QUIET_ENV): it and every client need the token
    errors: list[str] = []
    for _ in range(attempts):
        port = _free_port()
        home = Path(tempfile.mkdtemp(prefix="vlmforge-rayhead-home-"))
        (home / "ray_bootstrap_config.yaml").write_text(RAY_BOOTSTRAP)
        temp_dir = Path(tempfile.mkdtemp(prefix="vr-", dir="/tmp"))  # short: Ray's socket paths are limited
        log = home / "ray-start.log"
        cmd = [
            *_ray_cli(),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--port={port}",
            f"--num-cpus={num_cpus or os.cpu_count() or 1}",
            f"--object-store-memory={object_store_memory}",
            f"--temp-dir={temp_dir}",
        ]
        full_env = os.environ.copy() | QUIET_ENV | ray_process_env() | dict(env or {}) | {"HOME": str(home)}
        full_env.pop("RAY_ADDRESS", None)
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                cmd, env=full_env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        head = RayHead(f"127.0.0.1:{port}", home, temp_dir, log, proc)
        deadline = time.monotonic() + startup_timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            if "Ray runtime started" in log.read_text(errors="replace") and _port_open(port):
                return head
            time.sleep(0.5)
        errors.append(log.read_text(errors="replace")[-1500:])
        head.stop()
    raise RuntimeError(f"Ray head did not start in {attempts} attempts:\n" + "\n---\n".join(errors))


@contextlib.contextmanager
def ray_head(**kwargs: Any) -> Iterator[RayHead]:
    """:func:`start_ray_head` for a ``with`` block."""
    head = start_ray_head(**kwargs)
    try:
        yield head
    finally:
        head.stop()
