"""A real multi-node run, by both ways a user starts one: three Ray nodes on this machine, the release, the
media store and the output on ``s3://`` (moto's server on 127.0.0.1), upstream media behind recipes on a
loopback HTTP server, each run's output byte-identical to a one-node run of the same release.

The nodes are Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``): each node its own raylet,
object store, CPUs, custom resource and session folder, token-authenticated, all on 127.0.0.1 in Ray's
local-only mode that the embedded runtime uses (``ray start`` of a worker node refuses that mode, and outside
it would rewrite 127.0.0.1 to the machine's address). The driver attaches the same way it would to a cluster
of machines.

- ``vlmforge run --ray-address --out s3://...``, one worker node lost mid-run: at the run's first committed
  batch (stage event ``batches:1``, the driver paused) the test waits until the victim node has taken a
  batch, then SIGKILLs all its processes. Ray retries what it was running on the two nodes left. The test
  asserts: batches ran on every node; the run published every subset; nothing was lost (every subset's rows
  and samples as in the one-node run); nothing was fetched twice beyond the one batch the lost node had in
  hand; the S3 output (manifests, Energon datasets, metadataset: every object but the run's own records) is
  byte-identical to the one-node run's local output.
- The Prefect deployment path: the ``vlmforge-run/nemotron-v3-full`` deployment of prefect.yaml registered
  with ``prefect deploy``, a run of it with the S3 release, store and output passed as ``prefect deployment
  run --params``, executed by a real process worker (``--run-once``), the cluster named by the run's own
  ``cfg.execution.ray_address`` (no ``RAY_ADDRESS`` in the worker's environment). The flow run ends
  Completed, batches ran on every node, every subset published with its read-back ok, the S3 output
  byte-identical to the one-node run.

Both tests check that every listening socket of the test's process tree (the Prefect API, moto, the HTTP
server, the Ray nodes) and of the driver's (the CLI's, or the worker's and its flow run's) was on loopback,
sampled while the driver is paused at each stage event.

Shared: the release on S3, the upstream server and the one-node reference run are module fixtures, so the
reference runs once for both tests. Not shared: the cluster. The CLI test kills a node, and the deployment
test counts a node as used by the build-batch markers in its session logs; one cluster for both would
need the deployment test to run first (an order pytest does not promise by itself) and marker counts taken
before and after it. A fresh cluster per test costs its start (23 s of the module's 12 min, measured at
load 4-10 on 2 cores) and keeps each test's evidence its own.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import final_flow_run, output_hashes
from http_fixture import HttpFixture
from reliability.stage_events import StageEvents

from vlmforge.tasks.sample_release.shaped import UPSTREAM_ENV, ShapedRelease, build_shaped_release

# the reference run, two runs on three nodes, two clusters and a node failure: 12 min at load 4-10 on 2 cores
# (the CLI test alone took 13-15 min at load 20); per test (the first also waits for the reference) > 900 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
PREFECT = [sys.executable, "-m", "prefect", "--no-prompt"]
ROWS, SUBSETS, BATCH_LINES = 30, 6, 3  # kinds image, tar, multi, text, image, video (shaped_plan's v3 mix)
NODES = 3  # a head and two workers, one CPU each
MAX_IMAGES_A_ROW = 4
RUN_TIMEOUT_S = 900.0
KILL_AT = "batches:1"
DEPLOYMENT = "vlmforge-run/nemotron-v3-full"
POOL = "vlmforge-local"  # the pool of prefect.yaml's local deployments
COUNTS = ("lines", "ok", "rejected", "dropped", "images", "videos", "media_rejected", "text_tokens",
          "visual_tokens", "out_bytes")  # fmt: skip


class LoopbackCluster:
    """``tests/flows/ray_nodes.py`` as a child process: three Ray nodes on loopback, one lost on command."""

    def __init__(self, nodes: int, log: Path) -> None:
        script = Path(__file__).with_name("ray_nodes.py")
        self._log = log.open("wb")
        self.proc = subprocess.Popen([sys.executable, str(script), str(nodes)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True)  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()
        assert line, log.read_text(errors="replace")[-3000:]
        info = json.loads(line)
        self.address: str = info["address"]
        self.nodes: dict[str, Path] = {n["id"]: Path(n["temp_dir"]) for n in info["nodes"]}
        self.workers = sorted(n["id"] for n in info["nodes"] if not n["head"])

    def command(self, text: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.command("stop")
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()


def batch_markers(temp_dir: Path) -> int:
    """Build-batch task starts Ray's workers of a node logged (a retried task counts again)."""
    logs = temp_dir.glob("session_*/logs/worker-*.out")
    return sum(p.read_text(errors="replace").count(":task_name:build-batch") for p in logs)


def ran_batches(temp_dir: Path) -> bool:
    """Whether a worker of the node with this session folder ran (or runs) a build-batch task (Ray's own
    per-worker log marker)."""
    logs = temp_dir.glob("session_*/logs/worker-*.out")
    return any(":task_name:build-batch" in p.read_text(errors="replace") for p in logs)


def loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def listening(root: int) -> set[tuple[str, int, str]]:
    """(ip, port, process name) of every listening TCP socket of ``root`` and its descendants."""
    found = set()
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(root)
        for proc in [top, *top.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                for c in proc.net_connections(kind="inet"):
                    if c.status == psutil.CONN_LISTEN:
                        found.add((c.laddr.ip, c.laddr.port, proc.name()))
    return found


def stored_objects(fs: Any, root: str) -> set[str]:
    """The content store's objects (``<sha[:2]>/<sha>``), its upstream index and temp files left out."""
    names = {p.rsplit("/", 1)[-1] for p in fs.find(root)}
    return {n for n in names if len(n) == 64 and all(c in "0123456789abcdef" for c in n)}


def run_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", *args]
    with log.open("wb") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def run_record(out: str) -> dict[str, Any]:
    import fsspec

    fs, root = fsspec.core.url_to_fs(out)
    fs.invalidate_cache()
    records = sorted(fs.glob(f"{root}/runs/*.json"))
    assert len(records) == 1, records
    summary: dict[str, Any] = json.loads(fs.cat_file(records[0]))["summary"]
    return {s["subset"]: s for s in summary["subsets"]}


def assert_published_like(got: dict[str, Any], want: dict[str, Any], subsets: list[str]) -> None:
    """Every subset of the release published, read back ok, with the reference run's counts."""
    assert set(got) == set(subsets)
    for subset, s in got.items():
        assert s["published"] and s["validation"] == "ok", (subset, s)
        st = s["stats"]
        assert {k: st[k] for k in COUNTS} == {k: want[subset]["stats"][k] for k in COUNTS}, subset
        assert st["lines"] == st["ok"] + st["rejected"] + st["dropped"] and st["ok"] > 0, (subset, st)


def assert_loopback_only(sockets: set[tuple[str, int, str]]) -> None:
    assert any(name.startswith("raylet") for _, _, name in sockets), sockets
    exposed = sorted(s for s in sockets if not loopback(s[0]))
    assert exposed == [], exposed


@dataclass(frozen=True)
class S3Release:
    """The release on the module's S3 server: its URL, the server's endpoint and a file system on it, and
    the folder of the recipes that fetch its media."""

    url: str
    endpoint: str
    fs: Any  # s3fs.S3FileSystem
    recipes: Path


@dataclass(frozen=True)
class OneNodeRun:
    out: str  # a local folder
    store: str
    seconds: float


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> ShapedRelease:
    return build_shaped_release(tmp_path_factory.mktemp("shaped") / "v3", ROWS, subsets=SUBSETS)


@pytest.fixture(scope="module")
def upstream(shaped: ShapedRelease) -> Iterator[HttpFixture]:
    """The release's upstream images on a loopback HTTP server; a test resets its log before its run."""
    http = HttpFixture().start()
    for ref in shaped.upstream_refs:
        http.add(f"/{ref}", (shaped.upstream / ref).read_bytes())
    try:
        yield http
    finally:
        http.stop()


@pytest.fixture(scope="module")
def s3_release(
    prefect_harness: None, moto_s3: str, shaped: ShapedRelease, upstream: HttpFixture
) -> Iterator[S3Release]:
    """The release uploaded to ``s3://release/v3``, and, while the module runs, the environment that the
    Ray nodes (and so the tasks), the drivers and the Prefect worker inherit: the Prefect API, the S3
    endpoint for the store and the output, the recipes' upstream."""
    import s3fs
    from prefect.settings import get_current_settings

    fs = s3fs.S3FileSystem(endpoint_url=moto_s3)
    fs.mkdir("release")
    fs.put(str(shaped.root) + "/", "release/v3", recursive=True)
    env = {
        "PREFECT_API_URL": str(get_current_settings().api.url),
        "AWS_ENDPOINT_URL": moto_s3,
        UPSTREAM_ENV: upstream.url("").rstrip("/"),
        "PYTHONUNBUFFERED": "1",
    }
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        yield S3Release("s3://release/v3", moto_s3, fs, shaped.recipes)


def cli_options(release: S3Release) -> list[str]:
    """``vlmforge run`` arguments of the release: where it is and how to read it, no output yet."""
    return [release.url, "--storage-option", f"endpoint_url={release.endpoint}", "--recipes",
            str(release.recipes), "--env-allow", UPSTREAM_ENV, "--batch-lines", str(BATCH_LINES)]  # fmt: skip


@pytest.fixture(scope="module")
def one_node_run(s3_release: S3Release, tmp_path_factory: pytest.TempPathFactory) -> OneNodeRun:
    """The reference: ``vlmforge run`` on one node, the local executor with as many CPUs as the cluster (so
    the same batch plan; the executors write the same bytes), the output in a local folder."""
    folder = tmp_path_factory.mktemp("one-node")
    out, store, log = folder / "out", "s3://store-one/media", folder / "one.log"
    s3_release.fs.mkdir("store-one")
    t0 = time.monotonic()
    ref = run_cli([*cli_options(s3_release), "--out", str(out), "--store", store, "--num-cpus", str(NODES),
                   "--executor", "local"], os.environ.copy(), log)  # fmt: skip
    assert ref.wait(timeout=RUN_TIMEOUT_S) == 0, log.read_text(errors="replace")[-4000:]
    return OneNodeRun(str(out), store, time.monotonic() - t0)


def test_three_nodes_on_s3_survive_a_lost_node_with_identical_shards(
    s3_release: S3Release,
    one_node_run: OneNodeRun,
    upstream: HttpFixture,
    shaped: ShapedRelease,
    tmp_path: Path,
) -> None:
    fs = s3_release.fs
    for bucket in ("store-multi", "out-multi"):
        fs.mkdir(bucket)
    upstream.reset_log()  # the reference run's requests (and any other test's) are not this run's

    multi = "s3://out-multi/v3"
    seconds: dict[str, float] = {}
    sockets: set[tuple[str, int, str]] = set()
    killed: dict[str, Any] = {}
    cluster = LoopbackCluster(NODES, tmp_path / "nodes.log")
    try:
        victim = cluster.workers[-1]
        driver: subprocess.Popen[bytes] | None = None

        def at_event(event: str) -> None:  # the driver is paused at ``event`` while this runs
            assert driver is not None
            sockets.update(listening(os.getpid()) | listening(driver.pid))
            if event != KILL_AT:
                return
            deadline = time.monotonic() + 300  # a bound on a hung cluster, not a timing the test relies on
            while not ran_batches(cluster.nodes[victim]) and time.monotonic() < deadline:
                time.sleep(0.2)
            killed["had_batch"] = ran_batches(cluster.nodes[victim])
            killed["answer"] = cluster.command(f"kill {victim}")  # SIGKILL: raylet, object store, workers
            killed["event"] = event

        args = [*cli_options(s3_release), "--out", multi, "--store", "s3://store-multi/media",
                "--ray-address", cluster.address]  # fmt: skip
        with StageEvents(at_event) as events:
            seconds["multi"] = time.monotonic()
            driver = run_cli(args, os.environ.copy() | events.env, tmp_path / "multi.log")
            rc = driver.wait(timeout=RUN_TIMEOUT_S)
            seconds["multi"] = time.monotonic() - seconds["multi"]
        log = (tmp_path / "multi.log").read_text(errors="replace")
        assert rc == 0, log[-4000:]
        assert not events.errors, events.errors
        # the lost node's own logs may be gone with it: what it ran was seen before the kill
        placed = {node: ran_batches(temp) or node == victim for node, temp in cluster.nodes.items()}
        batches_by_node = [batch_markers(temp) for temp in cluster.nodes.values()]
    finally:
        cluster.close()

    # The node was lost mid-run, after a batch had committed, while it held a batch of its own.
    assert killed.get("event") == KILL_AT and killed["had_batch"], killed
    assert killed["answer"] == f"killed {victim}", killed
    assert len(placed) == NODES and all(placed.values()), placed  # batches ran on every node

    # Nothing lost: every subset published with the one-node run's counts.
    assert_published_like(run_record(multi), run_record(one_node_run.out), shaped.subsets)

    # Fetched once: every upstream image exactly once, but for the one batch the lost node held (one CPU).
    served = Counter(r.path.lstrip("/") for r in upstream.requests() if r.complete and r.status == 200)
    assert set(served) == set(shaped.upstream_refs)
    again = {ref: n for ref, n in served.items() if n > 1}
    assert all(n == 2 for n in again.values()) and len(again) <= BATCH_LINES * MAX_IMAGES_A_ROW, again
    fs.invalidate_cache()
    assert stored_objects(fs, "store-multi/media") == stored_objects(fs, one_node_run.store)

    # The same output, byte for byte, on S3 as the one-node run's on a local disk: every manifest part, every
    # Energon dataset and the metadataset (the run's own records and Energon's index.uuid/sqlite aside).
    want_out = output_hashes(one_node_run.out)
    assert any(k.startswith("energon/") and k.endswith(".tar") for k in want_out), want_out
    assert output_hashes(multi) == want_out

    # Every server of the run, Ray's nodes and the driver included, listened on loopback only.
    assert_loopback_only(sockets)
    print(f"one node {one_node_run.seconds:.0f} s, {NODES} nodes (one lost at {KILL_AT}) "
          f"{seconds['multi']:.0f} s; batches by node {batches_by_node}; fetched again {len(again)} of "
          f"{len(served)}")  # fmt: skip


def prefect_cli(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    res = subprocess.run([*PREFECT, *args], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=timeout, check=False)  # fmt: skip
    assert res.returncode == 0, f"prefect {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout + res.stderr


def test_a_deployment_run_by_a_worker_uses_every_node_with_identical_shards(
    s3_release: S3Release,
    one_node_run: OneNodeRun,
    shaped: ShapedRelease,
    tmp_path: Path,
) -> None:
    """prefect.yaml's full-run deployment, run by a process worker on the three-node cluster, the release,
    the store and the output on S3: as a user runs it (see README, "Output on S3 / several nodes")."""
    from vlmforge.flows.run_names import name_of

    fs = s3_release.fs
    for bucket in ("store-deployed", "out-deployed"):
        fs.mkdir(bucket)
    out, store = "s3://out-deployed/v3", "s3://store-deployed/media"
    # RunConfig's sub-models, as `vlmforge run` fills them from cli_options(), the Prefect UI shows them
    # and a deployment's `parameters: cfg:` holds them (prefect.yaml)
    cfg = {
        "out": out,
        "source": {"release": s3_release.url, "storage_options": {"endpoint_url": s3_release.endpoint}},
        "fetch": {"store": store, "env_allow": [UPSTREAM_ENV]},
        "media": {"catalogs": [str(s3_release.recipes)]},
        "batches": {"batch_lines": BATCH_LINES},
    }

    seconds: dict[str, float] = {}
    sockets: set[tuple[str, int, str]] = set()
    worker_sockets: set[tuple[str, int, str]] = set()
    seconds["cluster"] = time.monotonic()
    cluster = LoopbackCluster(NODES, tmp_path / "nodes.log")
    seconds["cluster"] = time.monotonic() - seconds["cluster"]
    try:
        # the run's own parameter names the cluster (its flow is decorated with a runner without one, and
        # no RAY_ADDRESS is around: the run attaches through cfg.execution.ray_address or not at all);
        # VLMFORGE_HOME is the checkout prefect.yaml's pull step runs flows from
        cfg["execution"] = {"ray_address": cluster.address}
        env = os.environ.copy() | {"VLMFORGE_HOME": str(REPO)}
        env.pop("RAY_ADDRESS", None)
        prefect_cli(env, "work-pool", "create", POOL, "--type", "process", "--overwrite")
        prefect_cli(
            env, "deploy", "--prefect-file", str(REPO / "prefect.yaml"), "--name", DEPLOYMENT.split("/")[1]
        )
        started = prefect_cli(env, "deployment", "run", DEPLOYMENT, "--params", json.dumps({"cfg": cfg}))
        flow_run_id = next(w for w in started.split() if len(w) == 36 and w.count("-") == 4)
        worker: subprocess.Popen[bytes] | None = None

        def at_event(event: str) -> None:  # the flow run's driver is paused at ``event`` while this runs
            assert worker is not None
            worker_sockets.update(listening(worker.pid))  # the worker, its flow run and the run's driver
            sockets.update(listening(os.getpid()))

        log = tmp_path / "worker.log"
        # the worker passes the stage-event socket on to its flow run, whose driver reports to it
        with StageEvents(at_event) as events, log.open("wb") as fh:
            seconds["deployed"] = time.monotonic()
            worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", POOL, "--run-once"], cwd=REPO,
                                      env=env | events.env, stdout=fh, stderr=subprocess.STDOUT)  # fmt: skip
            rc = worker.wait(timeout=RUN_TIMEOUT_S + 300)
            seconds["deployed"] = time.monotonic() - seconds["deployed"]
        worker_log = log.read_text(errors="replace")
        assert rc == 0, worker_log[-4000:]
        assert not events.errors, events.errors
        assert "batches:1" in events.seen, (events.seen, worker_log[-4000:])  # the run's driver was watched
        placed = {node: ran_batches(temp) for node, temp in cluster.nodes.items()}
        batches_by_node = [batch_markers(temp) for temp in cluster.nodes.values()]
    finally:
        cluster.close()

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = final_flow_run(client, flow_run_id)
    assert run.state.is_completed(), f"{run.state}\n{worker_log[-4000:]}"
    assert run.name == name_of(s3_release.url, out)
    assert len(placed) == NODES and all(placed.values()), (placed, batches_by_node)  # every node ran batches

    assert_published_like(run_record(out), run_record(one_node_run.out), shaped.subsets)
    fs.invalidate_cache()
    assert stored_objects(fs, "store-deployed/media") == stored_objects(fs, one_node_run.store)
    assert output_hashes(out) == output_hashes(one_node_run.out)

    # Every server, the worker's flow run and its Ray driver included, listened on loopback only.
    assert worker_sockets, "the flow run's driver listened on nothing while paused at a stage event"
    assert_loopback_only(sockets | worker_sockets)
    listeners = sorted({name for *_, name in worker_sockets})
    print(f"one node {one_node_run.seconds:.0f} s; {NODES} nodes started in {seconds['cluster']:.0f} s; "
          f"deployment run by a worker on it {seconds['deployed']:.0f} s; batches by node {batches_by_node}; "
          f"the worker's tree listened as {listeners}")  # fmt: skip
