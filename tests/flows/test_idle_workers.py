"""A Ray worker left idle is let go, on both Ray clusters vlmforge starts (a run's own, and the head of
``vlmforge server --ray``): once a subset's batches are done, the idle batch worker does not keep its memory
beside the worker that gates and publishes (``RAY_PROCESS_ENV`` in flows/runtime/embedded.py)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from conftest import running_local_ray

pytestmark = pytest.mark.slow  # a service (Ray, a Prefect server or an S3 server) of its own

EXIT_WAIT_S = 90.0  # Ray lets a worker go 2 s after its last task; a loaded CI machine may take far longer


@contextlib.contextmanager
def _server_head() -> Iterator[None]:
    import ray

    from vlmforge.flows.runtime.ray_head import ray_head

    with ray_head(num_cpus=2) as head:
        ray.init(
            address=head.address, _node_ip_address="127.0.0.1", log_to_driver=False, configure_logging=False
        )
        try:
            yield
        finally:
            ray.shutdown()


def _workers_of_two_concurrent_tasks(meeting: Path) -> set[int]:
    """The process ids of two tasks that ran at the same time, so in two workers."""
    import ray

    @ray.remote(num_cpus=1)
    def meet(where: str) -> int:
        # each task waits until the other has started: the two cannot share one worker
        Path(where, str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(os.listdir(where)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return os.getpid()

    return set(ray.get([meet.remote(str(meeting)), meet.remote(str(meeting))]))


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    "cluster", [running_local_ray, _server_head], ids=["run's own Ray", "server's Ray head"]
)
def test_an_idle_worker_is_let_go(
    cluster: Callable[[], contextlib.AbstractContextManager[None]], tmp_path: Path
) -> None:
    import ray

    assert not ray.is_initialized()
    with cluster():
        workers = _workers_of_two_concurrent_tasks(tmp_path)
        assert len(workers) == 2, workers
        # both now idle: the raylet stops them (with Ray's defaults they stay until the cluster stops)
        deadline = time.monotonic() + EXIT_WAIT_S
        alive = workers
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = {pid for pid in alive if _running(pid)}
        assert not alive, f"idle workers {sorted(alive)} still run {EXIT_WAIT_S:.0f} s after their last task"
        # and a task after that gets a fresh worker
        assert ray.get(ray.remote(lambda: os.getpid()).remote()) not in workers
