"""Shared fixtures and helpers. Everything runs on loopback with telemetry off; Prefect and Ray homes are
temporary. Test modules import the plain helpers by name (``from conftest import REAL_MEDIA, make_video``)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from http_fixture import HttpFixture

if TYPE_CHECKING:
    from vlmforge.schemas.config import RunConfig

_HOME = Path(tempfile.mkdtemp(prefix="vlmforge-tests-"))
# Before Prefect, Ray or Great Expectations are imported anywhere.
os.environ["PREFECT_HOME"] = str(_HOME / "prefect")
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("RAY_ADDRESS", None)
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"

# Ray's token for every Ray the tests start (token authentication, as in a run), never ~/.ray/auth_token.
os.environ["RAY_AUTH_TOKEN_PATH"] = str(_HOME / "ray" / "auth_token")

from vlmforge.flows.runtime.embedded import apply_quiet_env, ray_token_path  # noqa: E402

apply_quiet_env()
ray_token_path()

#: ``make check``: the tests that need no service (not marked ``slow``); starting Ray or a Prefect server
#: there is an error that names the test to mark
CHECK_MODE = os.environ.get("VLMFORGE_CHECK") == "1"


def pytest_configure(config: pytest.Config) -> None:
    if CHECK_MODE:
        _refuse_services()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``: ``-n 2 --dist loadgroup``) a module's tests stay on one worker, so
    its module fixtures (a reference run, a cluster) are made once; the Megatron-Bridge tests share one
    group, as they share the session's Bridge runs and probe (``bridge_probed``). First among the hooks:
    xdist's worker reads the groups in its own hook, and one that ran before this saw none (every test its
    own group: the Bridge probe, ~110 s, was made on both workers).

    Groups holding a ``slow`` test run first, the quick ones after: xdist hands out groups in collection
    order, so a long group (a Ray cluster, the Bridge probe) collected last kept one worker busy minutes after
    the other had run out of work; quick groups fill that tail instead."""
    groups: dict[int, str] = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None:
            path = Path(str(item.fspath))
            group = "training" if path.parent.name == "training" else str(path)
            item.add_marker(pytest.mark.xdist_group(group))
        else:
            group = str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        groups[id(item)] = group
    slow = {groups[id(item)] for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: groups[id(item)] not in slow)  # stable: each group keeps its order


def _refuse_services() -> None:
    """In ``make check``, every way a test starts Ray or a Prefect server raises instead."""
    import prefect.testing.utilities
    import ray

    import vlmforge.flows.runtime.embedded
    import vlmforge.flows.runtime.project_server
    import vlmforge.flows.runtime.ray_head

    def refuse(what: str) -> Any:
        def starter(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"{what} under `make check`: mark this test (or its module) slow")

        return starter

    ray.init = refuse("ray.init")
    prefect.testing.utilities.prefect_test_harness = refuse("a Prefect test server")
    vlmforge.flows.runtime.project_server.hold_project_server = refuse("a Prefect server")
    vlmforge.flows.runtime.embedded.start_local_ray = refuse("a local Ray")
    vlmforge.flows.runtime.ray_head.start_ray_head = refuse("a Ray head")


REAL_MEDIA = Path(
    os.environ.get("VLMFORGE_REAL_MEDIA", Path(__file__).resolve().parents[2] / "shared/testdata/real-media")
)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One real Prefect API (subprocess server on loopback) for every flow test of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def sample_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlmforge.tasks.sample_release.sample_build import build_sample_release

    return build_sample_release(tmp_path_factory.mktemp("release") / "sample").root


@pytest.fixture(scope="session")
def bridge_sample_runs(
    prefect_harness: None, sample_release: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The sample release run with each Megatron-Bridge trainer (tests/training/bridge_runs.py); skips,
    naming why, where Bridge's environment cannot be built."""
    from bridge_fed_checks import require_bridge_env
    from bridge_runs import sample_runs

    require_bridge_env()
    return sample_runs(sample_release, tmp_path_factory.mktemp("bridge-fed"))


@pytest.fixture(scope="session")
def bridge_layout_runs(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The benchmark-set layouts' replicas run with each Megatron-Bridge trainer (tests/training)."""
    from bridge_runs import layout_runs

    return layout_runs(tmp_path_factory.mktemp("bridge-layouts"))


@pytest.fixture(scope="session")
def bridge_probed(
    bridge_sample_runs: dict[str, Path], bridge_layout_runs: dict[str, Path]
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """What Bridge's real encoder did with every sample of both, in one probe process (megatron-core
    imported once a session): ``{"sample" | "layouts": trainer -> key -> line}``."""
    from bridge_runs import probe_all

    return probe_all(bridge_sample_runs, bridge_layout_runs)


@pytest.fixture
def srv() -> Iterator[HttpFixture]:
    """A loopback HTTP server with fault modes (``http_fixture.py``), one per test."""
    with HttpFixture() as s:
        yield s


@contextlib.contextmanager
def running_local_ray(num_cpus: int = 2) -> Iterator[None]:
    """A local Ray as a run starts its own (the flow's runner reuses an initialised Ray), stopped after."""
    import shutil

    import ray

    from vlmforge.flows.runtime.embedded import start_local_ray

    home = start_local_ray(num_cpus)
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def moto_s3() -> Iterator[str]:
    """The endpoint URL of a loopback moto S3 server, one per test module, starting empty."""
    import urllib.request

    import s3fs
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto keeps its buckets in process-wide state that outlives a server: without a reset, a module's
    # server still holds the buckets an earlier module made (``mkdir`` of the same bucket then fails)
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
    # s3fs caches its file systems by their arguments: one made without an endpoint (found through
    # AWS_ENDPOINT_URL) in an earlier module would still point at that module's stopped server
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()


@contextlib.contextmanager
def msc_profile(endpoint: str, bucket: str, folder: Path) -> Iterator[str]:
    """A Multi-Storage Client profile for ``bucket`` at the S3 ``endpoint`` (``MSC_CONFIG`` set while inside):
    yields the profile's name, for ``msc://<name>/<key>`` URLs. The name is the endpoint's and bucket's
    digest: MSC keeps one storage client per profile name for the process's life, so a name reused by a later
    module's server would reach the earlier, stopped one."""
    name = "s3" + hashlib.sha256(f"{endpoint}/{bucket}".encode()).hexdigest()[:12]
    config = folder / f"msc-{name}.yaml"
    config.write_text(
        f"profiles:\n  {name}:\n    storage_provider:\n      type: s3\n      options:\n"
        f"        base_path: {bucket}\n        endpoint_url: {endpoint}\n        region_name: us-east-1\n"
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MSC_CONFIG", str(config))
        yield name


# ----------------------------------------------------------------------------------------- flow runs


def with_executor(cfg: RunConfig, executor: str, **execution: Any) -> RunConfig:
    """``cfg`` run by ``executor`` (``local``: threads of the test process; ``ray``)."""
    options = cfg.execution.model_copy(update={"executor": executor, **execution})
    return cfg.model_copy(update={"execution": options})


def run_flow(cfg: RunConfig, *, executor: str = "local") -> Any:
    """``run_release(cfg)`` against the test harness's API, its tasks run by ``executor``: by default the
    local one (threads of this process), as every test whose subject is the flow's logic, not the
    cluster; ``"ray"`` starts a loopback Ray (or reuses one the test initialised or ``cfg`` names)."""
    from vlmforge.flows.pipeline import run_release
    from vlmforge.flows.runtime.embedded import embedded_runtime
    from vlmforge.flows.runtime.executors import runner_for

    cfg = with_executor(cfg, executor)
    with embedded_runtime():
        return run_release.with_options(task_runner=runner_for(cfg))(cfg)


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` by relative path, Energon's ``index.uuid`` and ``index.sqlite``
    left out: what must not change when a run is repeated."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "index.uuid" not in p.name and "index.sqlite" not in p.name
    }


#: what a run writes under OUT that is its own (ids, times, its Data Docs), not the release's product
PER_RUN = ("quality/", "runs/", "manifests/runs/", "manifests/subsets/")


def final_flow_run(client: Any, flow_run_id: str, timeout_s: float = 120) -> Any:
    """The flow run, once its worker has reported a final state (a bound on a lost report, not a timing a
    test relies on)."""
    run = client.read_flow_run(flow_run_id)
    deadline = time.monotonic() + timeout_s
    while not run.state or not run.state.is_final():
        assert time.monotonic() < deadline, run.state
        time.sleep(1)
        run = client.read_flow_run(flow_run_id)
    return run


def output_hashes(out: str) -> dict[str, str]:
    """sha256 of every file (object) under the output ``out`` (a folder or an fsspec URL such as
    ``s3://bucket/prefix``) by relative path, the run's own records (:data:`PER_RUN`) and Energon's
    ``index.uuid`` and ``index.sqlite`` left out: what two runs of the same release must write alike (a
    ``samples`` part's batch stats hold no clock reading nor transfer figure)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(out)
    root = root.rstrip("/")
    fs.invalidate_cache()
    hashes = {}
    for path in sorted(fs.find(root)):
        rel = path[len(root) + 1 :]
        name = rel.rsplit("/", 1)[-1]
        if rel.startswith(PER_RUN) or name in ("index.uuid", "index.sqlite"):
            continue
        data = fs.cat_file(path)
        hashes[rel] = hashlib.sha256(data).hexdigest()
    return hashes


def error_collecting_worker_config(num_workers: int = 0) -> tuple[Any, list[str]]:
    """A one-rank energon ``WorkerConfig`` whose per-sample errors land in the returned list (energon would
    otherwise log and skip them, so a test asserts the list empty)."""
    from megatron.energon import WorkerConfig

    errors: list[str] = []
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=num_workers,
        global_error_handler=lambda exc, *a, **k: errors.append(repr(exc)),
    )
    return wc, errors


def energon_dataset(path: str, fmt: Any, worker_config: Any) -> Any:
    """megatron-energon's train dataset of one published dataset (a path or an ``msc://`` URL), read once
    in order with the reader its sample format ``fmt`` names."""
    from megatron.energon import get_train_dataset

    return get_train_dataset(
        path,
        worker_config=worker_config,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=fmt.read_encoder(),
        repeat=False,
        **({"dataset_config": fmt.read_config} if fmt.read_config else {}),
    )


def load_energon_samples(out: str | Path, limit: int) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Up to ``limit`` samples of the run in ``out``: every published dataset loaded through megatron-energon
    with the reader its sample format names (the bridge format through vlmforge's reader of Bridge's parts,
    so Megatron-Bridge need not be installed; the crude one through the project's cooker), and the run's
    ``ok`` sample rows by key. Asserts that the loader reported no error and that every sample is a
    ``ChatSample`` with as many images and videos as its row."""
    from megatron.energon import get_loader

    from vlmforge.energon import ChatSample
    from vlmforge.tasks.ops.query import run_query
    from vlmforge.tasks.publish.formats import format_of_dataset

    wc, errors = error_collecting_worker_config()
    ok = {r["key"]: r for r in run_query(str(out), "SELECT * FROM samples WHERE status = 'ok'").to_pylist()}
    samples: list[Any] = []
    datasets = sorted(p.parent for p in (Path(out) / "energon").glob("*/.nv-meta"))
    assert datasets, f"no published dataset under {out}/energon"
    for path in datasets:
        fmt = format_of_dataset(path)
        ds = energon_dataset(str(path), fmt, wc)
        for _, item in zip(range(limit - len(samples)), get_loader(ds), strict=False):
            for sample in item if isinstance(item, list) else [item]:
                assert isinstance(sample, ChatSample)
                row = ok[sample.__key__]
                assert len(sample.images) == row["n_images"] and len(sample.videos) == row["n_videos"]
                samples.append(sample)
        if len(samples) >= limit:
            break
    assert errors == []
    return samples, ok


# -------------------------------------------------------------------------------------------- videos


def all_frames(n: int, fps: float) -> list[int]:
    """A ``choose_frames`` that samples every frame."""
    return list(range(n))


def make_video(
    *,
    codec: str = "libx264",
    fmt: str = "mp4",
    frames: int = 32,
    width: int = 64,
    height: int = 48,
    fps: int = 8,
    rotation: float | None = None,
    path: Path | None = None,
) -> bytes:
    """A small video of noise frames (the same bytes for the same arguments)."""
    import av
    import numpy as np

    buf = io.BytesIO()
    target: io.BytesIO | str = str(path) if path is not None else buf
    options = {"movflags": "faststart"} if path is not None and fmt == "mp4" else {}
    with av.open(target, "w", format=fmt, options=options) as container:
        stream = container.add_stream(codec, rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if rotation is not None:
            stream.set_display_rotation(rotation)
        rng = np.random.default_rng(0)
        for _ in range(frames):
            arr = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path.read_bytes() if path is not None else buf.getvalue()


def absurd_dimension_avi(width: int, height: int) -> bytes:
    """A small MJPEG AVI whose headers (AVI and every JPEG frame) claim ``width`` x ``height``."""
    import av
    import numpy as np

    buf = io.BytesIO()
    with av.open(buf, "w", format="avi") as container:
        stream = container.add_stream("mjpeg", rate=8)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuvj420p"
        for k in range(4):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 40 * k, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    data = bytearray(buf.getvalue())
    at = data.find(b"\xff\xc0")
    while at >= 0:  # SOF0: length(2) precision(1) height(2) width(2)
        data[at + 5 : at + 9] = struct.pack(">HH", height, width)
        at = data.find(b"\xff\xc0", at + 2)
    avih = data.find(b"avih") + 8
    data[avih + 32 : avih + 40] = struct.pack("<II", width, height)
    strf = data.find(b"strf") + 8
    data[strf + 4 : strf + 12] = struct.pack("<ii", width, height)
    return bytes(data)


def long_video(repeats: int = 20) -> bytes:
    """``30 * repeats`` frames: one 30-frame H.264 GOP of noise (expensive to decode) muxed ``repeats`` times,
    no re-encode."""
    import av

    src = av.open(io.BytesIO(make_video(frames=30, width=320, height=240, fps=30)), "r")
    in_stream = src.streams.video[0]
    packets = [p for p in src.demux(in_stream) if p.size]
    assert all(p.pts is not None and p.dts is not None for p in packets)
    step = (int(packets[-1].pts or 0) - int(packets[0].pts or 0)) // 29
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        out_stream = out.add_stream_from_template(in_stream)
        for r in range(repeats):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts = int(p.pts or 0) + r * 30 * step, int(p.dts or 0) + r * 30 * step
                q.duration, q.is_keyframe, q.time_base, q.stream = (
                    p.duration,
                    p.is_keyframe,
                    p.time_base,
                    out_stream,
                )
                out.mux(q)
    src.close()
    return buf.getvalue()
