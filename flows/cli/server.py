"""``vlmforge server``: the Prefect UI and API on 127.0.0.1 (``prefect server start``), telemetry off, and
with ``--docs OUT`` the Data Docs of the runs in OUT over http (``flows/runtime/docs_server.py``) on the next
port.

Registered on the main app by ``flows/cli/__init__.py`` (``server.register(app)``). With ``--ray`` it also
starts a local Ray head (loopback, token authentication, no dashboard) that deployments reach through
``RAY_ADDRESS`` with Ray's token (``~/.ray/auth_token`` unless ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH`` say
otherwise).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

SERVER_EXAMPLES = """
Examples:

  vlmforge server                      # UI at http://127.0.0.1:4200

  vlmforge server --docs ./out         # + Data Docs: http://127.0.0.1:4201/out/

  vlmforge server --port 4300 --ray    # also a local Ray head for the worker (prints its RAY_ADDRESS
                                       # and where its token is)

Then, in a second terminal (see infra/README.md):

  export PREFECT_API_URL=http://127.0.0.1:4200/api
  prefect work-pool create vlmforge-local --type process
  VLMFORGE_HOME=$PWD prefect deploy --all && vlmforge worker --pool vlmforge-local
"""


def register(app: typer.Typer) -> None:
    """Add the ``server`` command to ``app``."""
    app.command("server", epilog=SERVER_EXAMPLES)(server)


def server_command(port: int) -> list[str]:
    """The ``prefect server start`` command line, bound to loopback."""
    return [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]


def server_env() -> dict[str, str]:
    """This environment with Prefect's and Ray's telemetry off (always, whatever the caller set), its
    database in the project's Prefect home (:mod:`.prefect_home`)."""
    from ..runtime.embedded import QUIET_ENV
    from ..runtime.prefect_home import prefect_home
    from ..runtime.prefect_home import server_env as home_env

    env = home_env(prefect_home()) | QUIET_ENV
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    env["PREFECT_SERVER_API_HOST"] = "127.0.0.1"
    return env


def server(
    port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 4200,
    ray: Annotated[
        bool, typer.Option("--ray/--no-ray", help="also start a local Ray head for deployments")
    ] = False,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs of the local Ray head (with --ray)")] = None,
    docs: Annotated[
        list[str] | None,
        typer.Option(
            help="serve the Data Docs of the runs in this output folder (repeatable)", metavar="OUT"
        ),
    ] = None,
    docs_port: Annotated[
        int | None, typer.Option(help="port of the Data Docs on 127.0.0.1 (default: --port + 1)")
    ] = None,
) -> None:
    """Start the Prefect UI and API (with --docs the runs' Data Docs too) on 127.0.0.1 until Ctrl-C."""
    from rich.console import Console

    from ..runtime.prefect_home import (
        ServerRecord,
        forget_server,
        home_lock,
        prefect_home,
        record_server,
        recorded_server,
        seed_from_template,
    )
    from ..runtime.server_keeper import die_with_parent

    console = Console(stderr=True)
    if docs and _added_to_running(docs, port, docs_port, console):
        raise typer.Exit(0)
    docs_server = _start_docs(docs or [], port, docs_port, console)
    head = None
    if ray:
        from ..runtime.embedded import ray_token_path
        from ..runtime.ray_head import start_ray_head

        token = ray_token_path()  # the head runs with RAY_AUTH_MODE=token (QUIET_ENV): it needs the token
        head = start_ray_head(num_cpus=num_cpus, env={"PREFECT_API_URL": f"http://127.0.0.1:{port}/api"})
        where = f"RAY_AUTH_TOKEN_PATH={token}" if token else "RAY_AUTH_TOKEN"
        console.print(
            f"Ray head on {head.address} (token authentication): start workers with "
            f"RAY_ADDRESS={head.address} and the same {where}"
        )
    home = prefect_home()
    console.print(
        f"Prefect UI: http://127.0.0.1:{port}  (runs started in {Path.cwd()} report to it; elsewhere: "
        f"export PREFECT_API_URL=http://127.0.0.1:{port}/api)",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"Prefect home: {home}", highlight=False, soft_wrap=True)
    with home_lock(home):
        other = recorded_server(home)
        fresh = seed_from_template(home)
        proc = subprocess.Popen(server_command(port), env=server_env(), preexec_fn=die_with_parent)
        record_server(home, ServerRecord(f"http://127.0.0.1:{port}/api", os.getpid(), "server"))
    if other is not None:
        console.print(
            f"  a run's own server still serves this home at {other.url} until that run ends; runs started "
            "from now on report here",
            highlight=False,
            soft_wrap=True,
        )
    previous = signal.signal(signal.SIGTERM, _raise_exit)  # a terminated `vlmforge server` stops its server
    try:
        if fresh:
            _keep_template_once_healthy(port, proc, home)
        code = proc.wait()
    except (KeyboardInterrupt, SystemExit):
        code = 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        with home_lock(home):
            forget_server(home, os.getpid())
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if head is not None:
            head.stop()
        if docs_server is not None:
            docs_server.stop()
    raise typer.Exit(code)


def _added_to_running(outs: list[str], port: int, docs_port: int | None, console: Any) -> bool:
    """Whether a ``vlmforge server --docs`` already serves the docs port: then ``outs`` are added to it."""
    from ..docs_link import docs_port_for
    from ..runtime.docs_server import LOOPBACK, add_to_running

    base = f"http://{LOOPBACK}:{docs_port if docs_port is not None else docs_port_for(port)}"
    _check_local(outs)
    added = add_to_running(base, outs)
    if added is None:
        return False
    console.print(
        f"a vlmforge server already serves Data Docs at {base}/: added to it (no second server started)",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    for out in outs:
        quality = Path(out).resolve() / "quality"
        name = next((k for k, v in added.items() if v == quality), None)
        where = f"{base}/{name}/" if name else "already served there"
        console.print(f"  {Path(out).resolve()} -> {where}", highlight=False, markup=False, soft_wrap=True)
    return True


def _check_local(outs: list[str]) -> None:
    from ...tasks.errors import UsageError

    for out in outs:
        if "://" in out:
            raise UsageError(f"--docs {out}: not a local folder", "serve a local output folder")
        if Path(out).exists() and not Path(out).is_dir():
            raise UsageError(f"--docs {out}: is a file", "give a run's output folder")


def _start_docs(outs: list[str], port: int, docs_port: int | None, console: Any) -> Any:
    """The Data Docs server of ``outs`` (local folders), started; None without ``--docs``."""
    from ...tasks.errors import UsageError
    from ..docs_link import DOCS_URL_ENV, docs_port_for
    from ..runtime.docs_server import DocsServer, mount_names

    if not outs:
        return None
    _check_local(outs)
    wanted = docs_port if docs_port is not None else docs_port_for(port)
    try:
        docs_server = DocsServer(mount_names(outs), port=wanted).start()
    except OSError as exc:
        raise UsageError(f"--docs-port {wanted}: {exc.strerror or exc}", "give another --docs-port") from None
    console.print(f"Data Docs: {docs_server.url}/", highlight=False, markup=False)
    for name, root in docs_server.mounts.items():
        console.print(f"  {root.parent} -> {docs_server.url}/{name}/", highlight=False, markup=False)
    if docs_port is not None and docs_port != docs_port_for(port):
        console.print(
            f"  runs link to them when {DOCS_URL_ENV}={docs_server.url} is set", highlight=False, markup=False
        )
    return docs_server


def _keep_template_once_healthy(port: int, proc: subprocess.Popen[bytes], home: Path) -> None:
    """A fresh home's database, once the server has migrated it: the template of the next fresh home."""
    import time
    import urllib.request

    from ..runtime.prefect_home import save_template

    while proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2):
                save_template(home)
                return
        except OSError:
            time.sleep(0.5)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
