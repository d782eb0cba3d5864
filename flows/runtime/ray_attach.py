"""Which Ray cluster a run uses, and how its driver attaches.

``vlmforge run`` makes its task runner from the run's options (``flows/ops.runner_for``). A deployment's flow
run enters the runner its flow was decorated with, which names no cluster, and enters it before the run's
parameters are in Prefect's context: :func:`flow_run_execution` reads the run's own ``cfg.execution`` from
the flow run (Prefect's runtime API, by the id a worker gives the run's process).
"""

from __future__ import annotations

import os
from typing import Any

from ...schemas.config import ExecutionOptions, RunConfig

LOOPBACK = "127.0.0.1"


def attach_kwargs(address: str | None) -> dict[str, Any]:
    """``ray.init``'s extra arguments for a driver attaching to ``address`` (else ``RAY_ADDRESS``): on a
    loopback cluster the driver must say so (its default node IP is the host's, not 127.0.0.1)."""
    target = address or os.environ.get("RAY_ADDRESS") or ""
    host = target.removeprefix("ray://").split(":")[0]
    return {"_node_ip_address": LOOPBACK} if host in (LOOPBACK, "localhost") else {}


def attach_driver(address: str, init_kwargs: dict[str, Any]) -> bool:
    """Attach this process's Ray driver to the cluster at ``address`` before any flow run exists, so a
    cluster that refuses it ends the command with one line (exit 2), never a traceback and a flow run left
    Running. The runner then finds Ray initialised and uses it. False when Ray was initialised already."""
    import ray

    from ...tasks.errors import UsageError

    if ray.is_initialized():
        return False
    try:
        ray.init(address, **init_kwargs)
    except Exception as exc:  # noqa: BLE001 - every way the attach fails is the address's problem here
        detail = " ".join(str(exc).split()).split(". ")[0]
        if type(exc).__name__ == "AuthenticationError":
            raise UsageError(
                f"--ray-address {address}: Ray refused this driver: {detail} (vlmforge attaches with "
                "token authentication)",
                "give the cluster's token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH), or for a cluster started "
                "without token authentication set RAY_AUTH_MODE=disabled",
            ) from None
        raise UsageError(
            f"--ray-address {address}: cannot attach: {type(exc).__name__}: {detail}",
            f"is a Ray head up there (`ray status --address {address}`)?",
        ) from None
    return True


def execution_of(cfg: object) -> ExecutionOptions | None:
    """The execution options of a flow run's ``cfg`` parameter (a RunConfig, or its JSON from the API);
    None when it has none or is not a run configuration (the flow itself reports a bad one)."""
    if isinstance(cfg, RunConfig):
        return cfg.execution
    if not isinstance(cfg, dict):
        return None
    try:
        return ExecutionOptions.model_validate(cfg.get("execution") or {})
    except ValueError:
        return None


def flow_run_execution() -> ExecutionOptions | None:
    """The ``cfg.execution`` of the flow run this process was started for by a worker (None outside one)."""
    if not os.environ.get("PREFECT__FLOW_RUN_ID"):
        return None
    from prefect.runtime import flow_run

    return execution_of(flow_run.parameters.get("cfg"))
