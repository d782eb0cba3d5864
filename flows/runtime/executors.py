"""Where a run's tasks execute: the executor seam.

A flow takes its task runner the way datatrove's pipelines take an executor and img2dataset a distributor:
the stages and their bytes are the same whichever runs them. ``ray`` is the default of every user-facing
command and deployment (a local loopback Ray, or the cluster ``--ray-address`` names). ``local`` runs the
tasks in threads of the driver's process, with no Ray at all: a quick look on a laptop, a debugger that
steps into a batch, and the tests whose subject is the flow's logic rather than the cluster.

One entry per executor in :data:`EXECUTORS`; ``ExecutionOptions.executor`` names one of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from ...schemas.config import ExecutionOptions, RunConfig
from . import progress
from .embedded import LoopbackRayTaskRunner
from .ray_attach import attach_kwargs

__all__ = ["EXECUTORS", "LocalTaskRunner", "executor_cpus", "runner_for", "task_runner_for"]


class LocalTaskRunner(ThreadPoolTaskRunner):
    """Prefect's thread pool, one thread per CPU the run is given; reports start-up as the Ray runner does
    (the run's ``startup`` stage events are the same whichever executor runs it)."""

    def __init__(self, num_cpus: int | None = None) -> None:
        self.num_cpus = num_cpus
        super().__init__(max_workers=local_cpus(num_cpus))

    def duplicate(self) -> LocalTaskRunner:
        return type(self)(self.num_cpus)

    def __enter__(self) -> LocalTaskRunner:
        super().__enter__()
        progress.milestone("startup")  # the executor is ready, as "Ray is up" for the Ray runner
        return self


def local_cpus(num_cpus: int | None) -> int:
    """The CPUs a run on this machine is given: ``--num-cpus``, else every core (as a local Ray's)."""
    return num_cpus or os.cpu_count() or 1


def _ray(execution: ExecutionOptions) -> TaskRunner[Any]:
    return LoopbackRayTaskRunner(
        address=execution.ray_address,
        init_kwargs=attach_kwargs(execution.ray_address),
        num_cpus=execution.num_cpus,
        from_run_parameters=False,  # these are the run's options already
    )


def _local(execution: ExecutionOptions) -> TaskRunner[Any]:
    return LocalTaskRunner(execution.num_cpus)


#: executor name -> the task runner it makes from the run's execution options
EXECUTORS: dict[str, Callable[[ExecutionOptions], TaskRunner[Any]]] = {"ray": _ray, "local": _local}


def task_runner_for(execution: ExecutionOptions) -> TaskRunner[Any]:
    """The task runner of the executor ``execution.executor``."""
    return EXECUTORS[execution.executor](execution)


def runner_for(cfg: RunConfig) -> TaskRunner[Any]:
    """The task runner ``vlmforge run`` gives ``run_release``."""
    return task_runner_for(cfg.execution)


def executor_cpus(execution: ExecutionOptions) -> int:
    """CPUs the run's tasks have: a Ray cluster's (when the run uses Ray and it is up), else the configured
    ones. One batch runs per CPU; the count also sets how many batches a small subset is cut into."""
    cpus = 0
    if execution.executor == "ray":
        try:
            import ray

            if ray.is_initialized():
                cpus = int(ray.cluster_resources().get("CPU", 0))
        except Exception:  # noqa: BLE001 - sizing is best effort; the configured CPUs are the fallback
            cpus = 0
        return cpus or execution.num_cpus or 2
    return local_cpus(execution.num_cpus)
