"""A real multi-node run: three Ray nodes on this machine, the release, the media store and the output on
``s3://`` (moto's server on 127.0.0.1), upstream media behind recipes on a loopback HTTP server, ``vlmforge
run --ray-address --out s3://...``, and one worker node lost mid-run.

The nodes are Ray's own multi-node test cluster (``ray.cluster_utils.Cluster``): each node its own raylet,
object store, CPUs, custom resource and session folder, token-authenticated, all on 127.0.0.1 in Ray's
local-only mode that the embedded runtime uses (``ray start`` of a worker node refuses that mode, and outside
it would rewrite 127.0.0.1 to the machine's address). The driver attaches the same way it would to a cluster
of machines (``flows/ray_attach.py``).

At the run's first committed batch (stage event ``batches:1``, the driver paused) the test waits until the
victim node has taken a batch, then SIGKILLs all its processes. Ray retries what it was running on the
two nodes left. The test asserts: batches ran on every node; the run published every subset; nothing was
lost (every subset's rows and samples as in a one-node run of the same release); nothing was fetched twice
beyond the one batch the lost node had in hand; the S3 output (manifests, Energon datasets, metadataset:
every object but the run's own records) is byte-identical to the one-node run's local output; and every
listening socket of the test's and the driver's process trees was on loopback.
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
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import output_hashes
from http_fixture import HttpFixture
from reliability.stage_events import StageEvents

from vlmforge.tasks.ops.sample_release.shaped import UPSTREAM_ENV, ShapedRelease, build_shaped_release

# two runs, a cluster and a node failure: ~13-15 min at load 20 on 2 cores, above the suite default of 900 s
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

ROWS, SUBSETS, BATCH_LINES = 30, 6, 3  # kinds image, tar, multi, text, image, video (shaped_plan's v3 mix)
NODES = 3  # a head and two workers, one CPU each
MAX_IMAGES_A_ROW = 4
RUN_TIMEOUT_S = 900.0
KILL_AT = "batches:1"
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


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> ShapedRelease:
    return build_shaped_release(tmp_path_factory.mktemp("shaped") / "v3", ROWS, subsets=SUBSETS)


def test_three_nodes_on_s3_survive_a_lost_node_with_identical_shards(
    prefect_harness: None,
    moto_s3: str,
    shaped: ShapedRelease,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import s3fs
    from prefect.settings import get_current_settings

    fs = s3fs.S3FileSystem(endpoint_url=moto_s3)
    for bucket in ("release", "store-one", "store-multi", "out-multi"):
        fs.mkdir(bucket)
    fs.put(str(shaped.root) + "/", "release/v3", recursive=True)
    http = HttpFixture().start()
    for ref in shaped.upstream_refs:
        http.add(f"/{ref}", (shaped.upstream / ref).read_bytes())
    env_add = {
        "PREFECT_API_URL": str(get_current_settings().api.url),
        "AWS_ENDPOINT_URL": moto_s3,
        UPSTREAM_ENV: http.url("").rstrip("/"),
        "PYTHONUNBUFFERED": "1",
    }
    for k, v in env_add.items():
        monkeypatch.setenv(k, v)  # the nodes' processes (and so the tasks) and the drivers see them
    common = ["s3://release/v3", "--storage-option", f"endpoint_url={moto_s3}",
              "--recipes", str(shaped.recipes), "--env-allow", "VLMFORGE_SHAPED_UPSTREAM",
              "--batch-lines", str(BATCH_LINES)]  # fmt: skip

    # The reference: one node, the embedded Ray with as many CPUs as the cluster (the same batch plan).
    one = tmp_path / "one"
    seconds = {"one": time.monotonic()}
    ref = run_cli([*common, "--out", str(one), "--store", "s3://store-one/media", "--num-cpus", str(NODES)],
                  os.environ.copy(), tmp_path / "one.log")  # fmt: skip
    assert ref.wait(timeout=RUN_TIMEOUT_S) == 0, (tmp_path / "one.log").read_text(errors="replace")[-4000:]
    seconds["one"] = time.monotonic() - seconds["one"]
    http.reset_log()

    multi = "s3://out-multi/v3"
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

        args = [
            *common,
            "--out",
            multi,
            "--store",
            "s3://store-multi/media",
            "--ray-address",
            cluster.address,
        ]
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
    http.stop()

    # The node was lost mid-run, after a batch had committed, while it held a batch of its own.
    assert killed.get("event") == KILL_AT and killed["had_batch"], killed
    assert killed["answer"] == f"killed {victim}", killed
    assert len(placed) == NODES and all(placed.values()), placed  # batches ran on every node

    # Nothing lost: every subset published with the one-node run's counts.
    got, want = run_record(multi), run_record(str(one))
    assert set(got) == set(shaped.subsets)
    for subset, s in got.items():
        assert s["published"] and s["validation"] == "ok", (subset, s)
        st = s["stats"]
        assert {k: st[k] for k in COUNTS} == {k: want[subset]["stats"][k] for k in COUNTS}, subset
        assert st["lines"] == st["ok"] + st["rejected"] + st["dropped"] and st["ok"] > 0, (subset, st)

    # Fetched once: every upstream image exactly once, but for the one batch the lost node held (one CPU).
    served = Counter(r.path.lstrip("/") for r in http.requests() if r.complete and r.status == 200)
    assert set(served) == set(shaped.upstream_refs)
    again = {ref: n for ref, n in served.items() if n > 1}
    assert all(n == 2 for n in again.values()) and len(again) <= BATCH_LINES * MAX_IMAGES_A_ROW, again
    fs.invalidate_cache()
    assert stored_objects(fs, "store-multi/media") == stored_objects(fs, "store-one/media")

    # The same output, byte for byte, on S3 as the one-node run's on a local disk: every manifest part, every
    # Energon dataset and the metadataset (the run's own records and Energon's index.uuid/sqlite aside).
    want_out = output_hashes(str(one))
    assert any(k.startswith("energon/") and k.endswith(".tar") for k in want_out), want_out
    assert output_hashes(multi) == want_out

    # Every server of the run, Ray's nodes and the driver included, listened on loopback only.
    assert any(name.startswith("raylet") for _, _, name in sockets), sockets
    exposed = sorted(s for s in sockets if not loopback(s[0]))
    assert exposed == [], exposed
    print(f"one node {seconds['one']:.0f} s, {NODES} nodes (one lost at {KILL_AT}) {seconds['multi']:.0f} s; "
          f"batches by node {batches_by_node}; fetched again {len(again)} of {len(served)}")  # fmt: skip
