"""The embedded runtime: a Prefect API and a Ray cluster for one run, started only when none is configured.

Defaults start everything on loopback with telemetry off: a Prefect server subprocess on 127.0.0.1 (so
Ray workers share one API instead of each starting an ephemeral server) and a local Ray
head without a dashboard, whose processes see a HOME holding ``ray_bootstrap_config.yaml`` (without it
every Ray start probes cloud metadata addresses). They start concurrently: the server boots while the
driver imports the flow and starts Ray. The driver itself uses that server through Prefect's settings
context (:func:`use_api`), not the environment alone: Prefect reads its settings at import, so an
environment variable set later would leave the driver starting a temporary server of its own.
``PREFECT_API_URL`` and ``--ray-address``/``RAY_ADDRESS`` switch to existing services with the same code
path.

Loopback and authentication, the way Ray supports them:

- ``_node_ip_address="127.0.0.1"`` alone does not keep Ray on loopback: ``ray.init`` and ``ray start``
  replace a loopback node IP by the machine's address unless Ray runs in its local-only mode, the default on
  macOS and Windows, which ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` selects on Linux too. With a loopback
  node IP every Ray server (GCS, raylet, object manager, core workers, the driver, the dashboard and
  runtime-env agents, the metrics endpoints) binds the node IP, so nothing listens beyond 127.0.0.1. Ray
  reads that variable when it is imported: this module sets it before it imports Ray (prefect-ray).
- Token authentication: a Ray this module starts always runs with ``RAY_AUTH_MODE=token``; a driver or a
  ``ray start`` of this process uses token mode unless told otherwise (``QUIET_ENV``). The token is Ray's
  own: ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token`` (created
  0600 when missing, as ``ray get-auth-token --generate`` does).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger(__name__)

# Set before anything imports Ray, Prefect or Great Expectations (applied below, before prefect-ray).
QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray's local-only mode: a loopback node IP stays loopback
    "GX_ANALYTICS_ENABLED": "False",
    "DO_NOT_TRACK": "1",  # Prefect's client (SDK) telemetry and its first-run notice
    "AWS_EC2_METADATA_DISABLED": "true",
}

# The environment of a local Ray's processes, unless the caller's sets them.
# - glibc gives every thread that allocates an arena of its own, up to 8 per core, and keeps what is freed
#   in each: with a batch's 16 fetch threads, two arenas cut the peak tree RSS of 5,000 images from 3.42 to
#   3.20 GB, at the same wall time.
# - Arrow's buffers from glibc's heap, not from a mimalloc heap of their own that keeps what a stage freed
#   away from the next: the worker that gates, publishes and reads back 200,000 text rows peaked 0.1 GB
#   lower (peak tree RSS 2.52 -> 2.42 GB; 5,000 rows 2.35 -> 2.31).
# - Ray's raylet lets a task worker go once it has sat idle for 2 s (soft limit 0 workers; Ray's default keeps
#   one per CPU for the life of the cluster). Workers stay warm while there is work (the flow submits the next
#   task as one finishes), but once a subset's batches are done the idle batch worker no longer holds its
#   ~0.35 GB beside the worker that gates and publishes: peak tree RSS 5,000 text rows 2.30 -> 1.96 GB,
#   200,000 rows 2.35-2.37 -> 2.01, a 10-line run 2.26-2.29 -> 1.96. A longer wait (5 s) kept it through
#   most of a small subset's gate and publish (5,000 rows: 2.18 GB).
RAY_PROCESS_ENV = {
    "MALLOC_ARENA_MAX": "2",
    "ARROW_DEFAULT_MEMORY_POOL": "system",
    "RAY_num_workers_soft_limit": "0",
    "RAY_idle_worker_killing_time_threshold_ms": "2000",
}


def ray_process_env() -> dict[str, str]:
    """:data:`RAY_PROCESS_ENV`, where the caller's environment does not set a value of its own."""
    return {k: os.environ.get(k, v) for k, v in RAY_PROCESS_ENV.items()}


P = ParamSpec("P")
R = TypeVar("R")


def returns_freed_memory(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``, then what it freed handed back to the system (a Ray worker's task body).

    A Ray worker lives for the whole run and runs one task after another. glibc keeps what a task freed in
    its heap, so each worker's RSS stayed at the high-water mark of the largest task it ever ran: the idle
    worker that had built a 10,000-line text batch held ~0.05 GB more than one that had built a 1,250-line
    batch, and that leftover counted in the tree's peak while the other worker published. ``malloc_trim``
    returns the free pages of every arena (under a millisecond). A collection of the young generations first
    frees what only the task's own cycles held; a full one would walk the ~0.5M objects of a worker's imports
    (0.27 s a task).
    """

    @functools.wraps(fn)
    def body(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        finally:
            hand_back_freed_memory()

    return body


def hand_back_freed_memory() -> None:
    """What this process freed, back to the system: a young-generation collection, then glibc's trim."""
    gc.collect(1)
    _malloc_trim()


def _libc_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_MALLOC_TRIM = _libc_malloc_trim()  # glibc's; None on a libc without it (musl, macOS): nothing to hand back


def _malloc_trim() -> None:
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


RAY_BOOTSTRAP = "cluster_name: vlmforge-local\nprovider:\n  type: local\n"


def apply_quiet_env() -> None:
    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)


apply_quiet_env()

from prefect_ray import RayTaskRunner  # noqa: E402 - after the environment Ray reads at import

from . import progress, project_server  # noqa: E402
from .ray_attach import LOOPBACK, attach_driver, attach_kwargs, flow_run_execution  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def configured_api_url() -> str | None:
    """The Prefect API URL from the environment or the active Prefect settings (test harness, profile)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    return str(url) if url else None


def drain_prefect_senders(timeout_s: float = 15.0) -> None:
    """Send the logs and events this process still holds for the Prefect API, while its server is up.

    Prefect drains them at interpreter exit; with the embedded server already stopped by then, each queued
    batch retried its connection for up to ~100 s after the run had finished ("Error logging to API: All
    connection attempts failed"), so ``vlmforge run`` sat idle that long before exiting."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        service.drain_all(timeout=timeout_s)


@contextlib.contextmanager
def use_api(url: str) -> Iterator[str]:
    """Point this process and every process it starts at the Prefect API ``url`` for the block.

    Prefect reads its settings once, when it is imported (its root settings context), so setting
    ``PREFECT_API_URL`` in the environment afterwards reaches only child processes: this process would
    still see no API and start a temporary server of its own. The settings context fixes that for this
    process (and travels with every task prefect-ray submits); the environment for Ray's processes.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    previous = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
    finally:
        if previous is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous


def ray_token_path() -> Path | None:
    """Make Ray's authentication token reachable by every process this one starts; returns its file.

    ``RAY_AUTH_TOKEN`` set: nothing to do (children inherit it; None). Otherwise the file
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``, created (0600, random) when missing, and exported as
    ``RAY_AUTH_TOKEN_PATH``: Ray's processes run with another HOME (see :func:`start_local_ray`), so the
    default path would not find it.
    """
    if os.environ.get("RAY_AUTH_TOKEN"):
        return None
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").absolute()
    if not path.is_file():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_hex(32))
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    return path


def _require_local_only_ray() -> None:
    """Refuse to start a Ray that would listen beyond loopback (Ray imported before this module)."""
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError(
            "Ray was imported before vlmforge.flows.runtime.embedded set "
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so a local Ray would listen on every interface; import "
            "vlmforge first (or set it in the environment)"
        )


@contextlib.contextmanager
def _without_cluster_monitors() -> Iterator[None]:
    """``ray.init`` starts its one-node cluster without the autoscaler's monitor and the log monitor.

    A run's own Ray never scales (one node, its CPUs fixed) and sends no worker log to its driver
    (``log_to_driver=False``: the tasks log through Prefect), so both are two idle Python processes that
    hold ~0.17 GB between them and import Ray at start-up, beside the run's two cores. ``ray start`` has
    flags for both (``--no-monitor``, ``--include-log-monitor``); ``ray.init`` passes no such option to
    the parameters of the node it starts, so they are given defaults here, for the one call.
    """
    from ray._private import parameter

    given = parameter.RayParams

    class RunOwnClusterParams(given):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("no_monitor", True)
            kwargs.setdefault("include_log_monitor", False)
            super().__init__(*args, **kwargs)

    parameter.RayParams = RunOwnClusterParams  # type: ignore[misc]
    try:
        yield
    finally:
        parameter.RayParams = given  # type: ignore[misc]


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated for the block, then restored (a variable that was unset is unset again)."""
    previous = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def start_local_ray(num_cpus: int | None = None, attempts: int = 3) -> Path:
    """Start a local Ray head on loopback, token-authenticated, without dashboard; returns the HOME its
    processes see."""
    import ray

    _require_local_only_ray()
    home = Path(tempfile.mkdtemp(prefix="vlmforge-ray-home-"))
    (home / "ray_bootstrap_config.yaml").write_text(RAY_BOOTSTRAP)
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        # A run's own cluster needs no token on disk: a random one in the environment reaches every process
        # the run starts and dies with them.
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    ray_token_path()
    # Ray's processes inherit the environment at start: swap HOME (and the allocator's settings) only around
    # the start. RAY_AUTH_MODE unset: ray.init then turns token authentication on for the new cluster, for
    # itself and its processes.
    os.environ.pop("RAY_AUTH_MODE", None)
    with _environ({"HOME": str(home)} | ray_process_env()):
        for attempt in range(1, attempts + 1):
            try:
                with (
                    _quiet("ray._private.authentication.authentication_token_setup"),  # "token auth is on"
                    _without_cluster_monitors(),
                ):
                    ray.init(
                        # "local": a Ray of the run's own, never one that ray.init would otherwise find
                        # (RAY_ADDRESS, or the last `ray start` on the machine via ray_current_cluster)
                        address="local",
                        _node_ip_address=LOOPBACK,
                        include_dashboard=False,
                        num_cpus=num_cpus or os.cpu_count() or 1,
                        object_store_memory=256 * 1024**2,
                        log_to_driver=False,
                        configure_logging=False,
                        namespace="prefect",
                    )
                break
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for this one
                # Ray gives a starting raylet 30 s to register with its GCS (hard-coded); on a loaded machine,
                # with the Prefect server booting at the same time, that can run out: start afresh.
                ray.shutdown()
                if attempt == attempts or "timed out during startup" not in str(exc):
                    raise
                log.warning("local Ray did not start in time (attempt %d of %d); retrying", attempt, attempts)
    if ray.util.get_node_ip_address() != LOOPBACK:  # never a reachable Ray by accident
        ray.shutdown()
        raise RuntimeError(f"local Ray took node IP {ray.util.get_node_ip_address()}, not {LOOPBACK}")
    return home


class LoopbackRayTaskRunner(RayTaskRunner):
    """prefect-ray's runner, but a Ray it starts itself is the loopback, probe-free one of start_local_ray.

    With an address (argument or ``RAY_ADDRESS``) it connects as prefect-ray does; an already initialised Ray
    is reused. The flow carries this runner, so a CLI run and a deployment run by a worker behave the same.
    """

    address: str | None  # prefect-ray's attributes, typed here
    init_kwargs: dict[str, Any]

    def __init__(
        self,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        num_cpus: int | None = None,
        *,
        from_run_parameters: bool = True,
    ) -> None:
        super().__init__(address=address, init_kwargs=init_kwargs)
        self.num_cpus = num_cpus
        # the flow's runner as decorated takes a deployment run's cfg.execution; one made from a run's
        # options (`vlmforge run`, whose process may sit inside some other flow run) does not look further
        self.from_run_parameters = from_run_parameters
        self._local_home: Path | None = None

    def duplicate(self) -> LoopbackRayTaskRunner:
        return type(self)(
            address=self.address,
            init_kwargs=self.init_kwargs,
            num_cpus=self.num_cpus,
            from_run_parameters=self.from_run_parameters,
        )

    def starts_local_ray(self) -> bool:
        """Whether entering this runner would start a local Ray (no address, none initialised)."""
        import ray

        return not ray.is_initialized() and not (self.address or os.environ.get("RAY_ADDRESS"))

    def __enter__(self) -> LoopbackRayTaskRunner:
        apply_quiet_env()
        self._take_flow_run_execution()
        if self.starts_local_ray():
            self._local_home = start_local_ray(self.num_cpus)
        super().__enter__()
        progress.milestone("startup")  # Ray is up (or reached)
        return self

    def _take_flow_run_execution(self) -> None:
        """A deployment run's runner attaches where the run's own ``cfg.execution`` says (see
        :mod:`.ray_attach`); a runner given an address, or made from a run's options, keeps its own."""
        execution = flow_run_execution() if self.from_run_parameters and self.address is None else None
        if execution is None:
            return
        self.address = execution.ray_address or self.address
        self.num_cpus = self.num_cpus or execution.num_cpus
        if self.address:
            self.init_kwargs = attach_kwargs(self.address) | self.init_kwargs

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
def embedded_runtime(
    runner: object | None = None,
    while_booting: Callable[[], object] | None = None,
    startup_timeout_s: float = 180.0,
) -> Iterator[str]:
    """A Prefect API for the run (the project's server when none is configured: :mod:`.project_server`),
    started concurrently with the rest of the start-up: while the server boots, ``while_booting`` runs (the
    CLI imports the flow there) and the local Ray a :class:`LoopbackRayTaskRunner` ``runner`` would start
    is started, so its ``__enter__`` finds it up (any other runner starts nothing here). Ray's processes
    inherit ``PREFECT_API_URL``. On the way out Ray stops first, then the server is let go of."""
    apply_quiet_env()
    url = configured_api_url()
    server = None if url else project_server.hold_project_server()
    url = url or server.url  # type: ignore[union-attr]
    ray_home: Path | None = None
    attached = False
    try:
        with use_api(url):  # before Ray starts: its processes inherit the URL
            if while_booting is not None:
                while_booting()
            if isinstance(runner, LoopbackRayTaskRunner) and runner.starts_local_ray():
                ray_home = start_local_ray(runner.num_cpus)
            elif isinstance(runner, LoopbackRayTaskRunner):  # refused: one line, before any flow run
                attached = attach_driver(
                    runner.address or os.environ.get("RAY_ADDRESS", ""), runner.init_kwargs
                )
            if server is not None:
                server.wait_healthy(startup_timeout_s)
            progress.milestone("startup")  # the Prefect API answers
            yield url
    finally:
        try:
            if ray_home is not None or attached:
                import ray

                ray.shutdown()
            if ray_home is not None:
                shutil.rmtree(ray_home, ignore_errors=True)
        finally:
            if server is not None:
                drain_prefect_senders()
                server.release()
