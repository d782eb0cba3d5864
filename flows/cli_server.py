"""``vlmforge server``: the Prefect UI and API on 127.0.0.1 (``prefect server start``), telemetry off.

Registered on the main app by ``flows/cli.py`` (``cli_server.register(app)``). With ``--ray`` it also starts a
local Ray head (loopback, token authentication, no dashboard) that deployments reach through ``RAY_ADDRESS``
with Ray's token (``~/.ray/auth_token`` unless ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` say otherwise).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Annotated

import typer

SERVER_EXAMPLES = """
Examples:

  vlmforge server                      # UI at http://127.0.0.1:4200

  vlmforge server --port 4300 --ray    # also a local Ray head for the worker (prints its RAY_ADDRESS
                                       # and where its token is)

Then, in a second terminal (see infra/README.md):

  export PREFECT_API_URL=http://127.0.0.1:4200/api
  prefect work-pool create vlmforge-local --type process
  VLMFORGE_HOME=$PWD prefect deploy --all && prefect worker start --pool vlmforge-local
"""


def register(app: typer.Typer) -> None:
    """Add the ``server`` command to ``app``."""
    app.command("server", epilog=SERVER_EXAMPLES)(server)


def server_command(port: int) -> list[str]:
    """The ``prefect server start`` command line, bound to loopback."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]


def server_env() -> dict[str, str]:
    """This environment with Prefect's and Ray's telemetry off (always, whatever the caller set)."""
    from .runtime import QUIET_ENV

    env = os.environ.copy() | QUIET_ENV
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PREFECT_SERVER_API_HOST"] = "127.0.0.1"
    return env


def server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 4200,
    ray: Annotated[
        bool, typer.Option("--ray/--no-ray", help="also start a local Ray head for deployments")
    ] = False,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs of the local Ray head (with --ray)")] = None,
) -> None:
    """Start the Prefect UI and API on 127.0.0.1 (analytics off) until Ctrl-C."""
    from rich.console import Console

    console = Console(stderr=True)
    head = None
    if ray:
        from .ray_head import start_ray_head
        from .runtime import ray_token_path

        token = ray_token_path()  # the head runs with RAY_AUTH_MODE=token (QUIET_ENV): it needs the token
        head = start_ray_head(num_cpus=num_cpus, env={"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"})
        where = f"RAY_AUTH_TOKEN_PATH={token}" if token else "RAY_AUTH_TOKEN"
        console.print(
            f"Ray head on {head.address} (token authentication): start workers with "
            f"RAY_ADDRESS={head.address} and the same {where}"
        )
    console.print(
        f"Prefect UI: http://127.0.0.1:{port}  (export PREFECT_API_URL=http://127.0.0.1:{port}/api)"
    )
    proc = subprocess.Popen(server_command(port), env=server_env())
    previous = signal.signal(signal.SIGTERM, _raise_exit)  # a terminated `vlmforge server` stops its server
    try:
        code = proc.wait()
    except (KeyboardInterrupt, SystemExit):
        code = 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if head is not None:
            head.stop()
    raise typer.Exit(code)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
