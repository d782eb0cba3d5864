"""The first lines of ``vlmforge run``: which Ray and which Prefect API the run uses, said before they start;
and its last: where to see the run afterwards (links that outlive the run).

A run starts a Ray of its own unless told to attach (``--ray-address`` or ``RAY_ADDRESS``): a Ray that
another ``ray start --head`` left on the machine is never picked up by accident, so the line names it and
how to use it instead.
"""

from __future__ import annotations

import os

from ..schemas.config import ExecutionOptions


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
    """One line: the Prefect API the run reports to (a server of its own when none is configured)."""
    if api_url:
        return f"Prefect: reporting to {api_url}"
    return (
        'Prefect: starting its own server on 127.0.0.1 for this run only (its "View at" link ends with the '
        "run; `vlmforge server` keeps one running)"
    )


def after_run_lines(out: str, run_id: str, api_url: str | None) -> list[str]:
    """Where to see the run once it has ended: its Data Docs (over http when a ``vlmforge server --docs``
    serves them) and, after a run with a Prefect server of its own, that its "View at" link died with it."""
    from .docs_link import docs_line

    lines = [line] if (line := docs_line(out, run_id, api_url)) else []
    if not api_url:
        lines.append(
            'Prefect: the run\'s own server stopped with it, and its "View at" link too; to keep runs '
            f"to browse, start `vlmforge server --docs {out}` and run with "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (this run's results stay: "
            f"`vlmforge quality {out}`)"
        )
    return lines


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
