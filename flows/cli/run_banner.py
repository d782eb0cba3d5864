"""The first lines of ``vlmforge run``: which Ray and which Prefect API the run uses, said before they start;
and its last: where to see the run afterwards (links that outlive the run).

A run starts a Ray of its own unless told to attach (``--ray-address`` or ``RAY_ADDRESS``): a Ray that
another ``ray start --head`` left on the machine is never picked up by accident, so the line names it and
how to use it instead.
"""

from __future__ import annotations

import os

from ...schemas.config import ExecutionOptions


def ray_line(execution: ExecutionOptions) -> str:
    """One line: the Ray this run uses (its own, or the cluster it attaches to, and why), or that it uses
    none (``--executor local``)."""
    address, num_cpus = execution.ray_address, execution.num_cpus
    if execution.executor == "local":
        return f"executor: local, {num_cpus or os.cpu_count() or 1} threads in this process (no Ray)"
    if address:
        return f"Ray: attaching to the cluster at {address} (--ray-address)"
    if os.environ.get("RAY_ADDRESS"):
        return f"Ray: attaching to the cluster at {os.environ['RAY_ADDRESS']} (RAY_ADDRESS)"
    cpus = num_cpus or os.cpu_count() or 1
    line = f"Ray: starting its own on 127.0.0.1 ({cpus} CPUs)"
    other = _last_ray_start()
    if other:
        line += f"; not the Ray at {other} that `ray start` left (use it with --ray-address {other})"
    return line


def prefect_line(api_url: str | None) -> str:
    """One line: the Prefect API the run reports to (when none is configured: the project's server, which
    the run starts when none serves the project's Prefect home)."""
    if api_url:
        return f"Prefect: reporting to {api_url}"
    from ..runtime.prefect_home import prefect_home, recorded_server

    home = prefect_home()
    serving = recorded_server(home)
    if serving is not None:
        return f"Prefect: reporting to this project's server at {serving.url} (Prefect home {home})"
    return (
        f"Prefect: starting a server on 127.0.0.1 for the Prefect home {home} (it stops with "
        "the run; the run's records stay there)"
    )


def after_run_lines(out: str, run_id: str, api_url: str | None) -> list[str]:
    """Where to see the run once it has ended: its Data Docs (over http when a ``vlmforge server --docs``
    serves them) and, after a run whose Prefect server stopped with it, where its records are and how to
    browse them."""
    from ..docs_link import docs_line

    lines = [line] if (line := docs_line(out, run_id, api_url)) else []
    if not api_url:
        from ..runtime.prefect_home import prefect_home, recorded_server

        home = prefect_home()
        serving = recorded_server(home)
        if serving is not None and serving.kind == "server":
            return lines  # its "View at" link stays live: `vlmforge server` serves the project
        lines.append(
            f"Prefect: the run's records are kept in the Prefect home {home}; browse them with "
            f"`vlmforge server --docs {out}` {_from_where(home)}"
        )
    return lines


def _from_where(home: object) -> str:
    """Where ``vlmforge server`` finds ``home`` again: the same folder, or the variable that named it."""
    from ..runtime.prefect_home import HOME_ENV

    for name in ("PREFECT_HOME", HOME_ENV):
        if os.environ.get(name):
            return f"with {name}={home}"
    return f"from {os.getcwd()}"


def _last_ray_start() -> str | None:
    """The address the last ``ray start`` on this machine wrote for ``ray.init()`` to find, if any (Ray's
    own lookup: ``$RAY_TMPDIR``, else ``$TMPDIR``, else ``/tmp``, then ``ray/ray_current_cluster``; read
    here without importing Ray, which the run imports later in its own order)."""
    base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
    try:
        with open(os.path.join(base, "ray", "ray_current_cluster")) as fh:
            return fh.read().strip() or None
    except OSError:
        return None
