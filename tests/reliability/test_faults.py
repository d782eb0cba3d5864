"""Faults of issue 11: the whole run SIGKILLed at seeded points of every stage, a Ray worker killed in the
middle of a task, and a full output volume. After each, a plain rerun ends with the bytes of an uninterrupted
run, nothing partial is ever under a final name, and no stored object is fetched twice.

Every run is the real ``vlmforge run`` CLI in its own session (so a kill reaches the driver, the Ray head it
started and every Ray worker: they share the session). The reference run and the worker kill run on Ray; the
killed runs and their resumes on the local executor (the tasks in threads of the run's process: a kill ends
them with it), which writes the same bytes (tests/flows/test_executor_seam.py) without a Ray start per run,
so the final rerun's bytes are compared with a Ray run's. The release is made of the sample release's
``photo_vqa`` subset (images in a release tar, loose ones, a 27 MP photo that is resized) and a
``remote_photos`` subset whose media a recipe sends to an HTTP server on 127.0.0.1. The Prefect API is the
session's test server (outside the killed session).

Kill points are the run's own stage events, not times: the reference run reports every event to this test
(``VLMFORGE_TEST_WATCH_SOCKET``), seeded points are drawn from them, and each killed run gets
``VLMFORGE_TEST_KILL_AT=<stage>:<n>`` (``flows/runtime/faults.py``), so it dies at exactly that event however
busy the machine is, and the test checks that it did.

Figures go to the JSON file named by ``VLMFORGE_FAULT_REPORT`` (``benchmarks/fault_report.py`` prints them);
``VLMFORGE_FAULT_KILLS_PER_STAGE`` (default 4, five stages, fewer where a stage has fewer events) sets the
number of kill points.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest
import yaml
from http_fixture import Fault, HttpFixture
from stage_events import StageEvents

from vlmforge.flows.runtime.faults import KILL_ENV, KILL_MARK

pytestmark = pytest.mark.slow

SUBSETS = ("photo_vqa", "remote_photos")
BATCH_LINES = 2
STAGES = ("startup", "batches", "gate", "publish", "validate")
KILLS_PER_STAGE = int(os.environ.get("VLMFORGE_FAULT_KILLS_PER_STAGE", "4"))
SEED = 11
# A resumed run does not gate, publish or validate a subset already recorded as published and read back
# (OUT/runs/current): after an earlier kill one subset may be complete, and the next run reaches fewer of
# these stages' events than the reference (CI: validate:2 never came). Before each round of these stages
# the records go, as in an output of an earlier vlmforge, so every subset passes through them again and
# every planned event is reached; the published bytes must come out the same all the same.
REDONE_STAGES = ("gate", "publish", "validate")
RUN_TIMEOUT_S = 900.0
# Remote objects: name -> seed of its JPEG; "gone.jpg" is a 404 (a classified fetch failure, not retried).
REMOTE = {"a.jpg": 1, "b.jpg": 2, "c.jpg": 3, "d.jpg": 4}
REMOTE_REFS = ["a.jpg", "b.jpg", "c.jpg", "a.jpg", "d.jpg", "gone.jpg"]


# ------------------------------------------------------------------------------------------------ report


def record_figures(section: str, figures: dict[str, Any]) -> None:
    """Merge one test's figures into the JSON file named by ``VLMFORGE_FAULT_REPORT`` (if set)."""
    target = os.environ.get("VLMFORGE_FAULT_REPORT")
    if not target:
        return
    path = Path(target)
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[section] = figures
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------- the world


def _jpeg(seed: int) -> bytes:
    from PIL import Image
    from skimage import data

    img = Image.fromarray(data.astronaut()).rotate(seed * 7).resize((320 + 16 * seed, 240))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


@dataclass
class World:
    """The release, the recipe folder, the HTTP server and the Prefect API shared by every fault test."""

    root: Path
    release: Path
    recipes: Path
    srv: HttpFixture
    api: str
    ray_tmp: str
    reference: Path = Path()
    ref_snapshot: dict[str, Any] = field(default_factory=dict)
    ref_seconds: float = 0.0
    ref_events: list[str] = field(default_factory=list)  # "stage:n", as the reference run reported them

    def args(self, out: Path, executor: str, *extra: str) -> list[str]:
        subsets = [a for s in SUBSETS for a in ("--subset", s)]
        batch = ["--batch-lines", str(BATCH_LINES), "--executor", executor]
        return [
            str(self.release),
            "--out",
            str(out),
            "--recipes",
            str(self.recipes),
            *subsets,
            *batch,
            *extra,
        ]

    def env(self, **extra: str) -> dict[str, str]:
        env = os.environ.copy()
        env |= {"PREFECT_API_URL": self.api, "RAY_TMPDIR": self.ray_tmp, "PYTHONUNBUFFERED": "1"}
        return env | extra


def _build_release(root: Path, sample_release: Path, srv: HttpFixture) -> tuple[Path, Path]:
    release = root / "release"
    shutil.copytree(sample_release / "photo_vqa", release / "photo_vqa")
    remote = release / "remote_photos"
    remote.mkdir(parents=True)
    (remote / "README.md").write_text("# remote photos\n\nLicense: CC0-1.0\n")
    rows = [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": f"img/{name}"}, "What is it?"]},
                {"role": "assistant", "content": f"photo {i}"},
            ],
        }
        for i, name in enumerate(REMOTE_REFS)
    ]
    (remote / "remote_photos.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, seed in REMOTE.items():  # a slow body: kills land mid-fetch too
        srv.add(f"/media/{name}", _jpeg(seed), Fault("delay", delay=0.3))
    recipes = root / "recipes"
    recipes.mkdir()
    (recipes / "remote_photos.yaml").write_text(
        "subset: remote_photos\nlicense: CC0-1.0\n"
        f"sources:\n  - kind: http_files\n    allow_private: true\n    url: {srv.url('/media/{name}')}\n"
    )
    return release, recipes


@pytest.fixture(scope="module")
def world(
    prefect_harness: None, sample_release: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    from vlmforge.flows.runtime.embedded import configured_api_url

    api = configured_api_url()
    assert api and api.startswith("http://127.0.0.1:"), api
    root = tmp_path_factory.mktemp("faults")
    ray_tmp = tempfile.mkdtemp(prefix="vfr-")  # short: Ray's socket paths live under it
    with HttpFixture() as srv:
        release, recipes = _build_release(root, sample_release, srv)
        w = World(root=root, release=release, recipes=recipes, srv=srv, api=api, ray_tmp=ray_tmp)
        w.reference = root / "reference"
        t0 = time.time()
        with StageEvents() as events:
            # the reference runs on Ray, as a user's run: the killed runs (local) must end with its bytes
            proc = start_run(w, w.reference, root / "reference.log", "ray", **events.env)
            wait_run(proc, root / "reference.log")
        w.ref_seconds = time.time() - t0
        w.ref_snapshot = snapshot(w.reference)
        w.ref_events = events.seen
        srv.reset_log()
        try:
            yield w
        finally:
            shutil.rmtree(ray_tmp, ignore_errors=True)


# ------------------------------------------------------------------------------------------ processes


def start_run(
    w: World, out: Path, log: Path, executor: str = "local", extra: tuple[str, ...] = (), **env: str
) -> subprocess.Popen[bytes]:
    """``vlmforge run`` in a session of its own: every process it starts (Ray included) shares it. Its tasks
    run on ``executor``: the local one (threads of the run's process) unless the test is about Ray's
    processes; a kill at a stage event ends the run's every process either way."""
    with log.open("ab") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "vlmforge.flows.cli", "run", *w.args(out, executor, *extra)],
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=w.env(**env),
            start_new_session=True,
        )


def wait_run(proc: subprocess.Popen[bytes], log: Path, expect: int = 0) -> None:
    try:
        rc = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_session(proc)
    assert rc == expect, f"exit {rc}:\n{log.read_text(errors='replace')[-4000:]}"


def session_procs(sid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes of session ``sid``."""
    procs = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                procs.append(proc)
        except (OSError, psutil.Error):
            continue
    return procs


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the run's session (driver, Ray head, Ray workers) until none is left (a
    process may still start while the others die, hence the rounds)."""
    for _ in range(20):
        procs = session_procs(proc.pid)
        if not procs:
            break
        for p in procs:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(procs, timeout=30)
    proc.wait(timeout=30)
    assert not session_procs(proc.pid), "processes of the killed run survived"


# ------------------------------------------------------------------------------------ the Prefect API


def _api(w: World, path: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        w.api + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat()


def flow_run_since(w: World, t0: float) -> dict[str, Any] | None:
    runs = _api(
        w,
        "/flow_runs/filter",
        {
            "flow_runs": {"expected_start_time": {"after_": _iso(t0 - 1)}},
            "sort": "START_TIME_DESC",
            "limit": 1,
        },
    )
    return runs[0] if runs else None


def task_runs(w: World, flow_run_id: str) -> list[dict[str, Any]]:
    return list(_api(w, "/task_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}))


# ------------------------------------------------------------------------------------------- outputs


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(out: Path) -> dict[str, Any]:
    """What must not change across kills and resumes: manifest rows and fingerprints, shard bytes, the
    Energon metadata, the store's objects and upstream index."""
    snap: dict[str, Any] = {}
    for table in ("samples", "media", "records", "shards"):
        for p in sorted((out / "manifests" / table).glob("subset=*/part-*.parquet")):
            tbl = pq.read_table(p)
            fp = (tbl.schema.metadata or {}).get(b"vlmforge.fingerprint")
            snap[f"manifests/{table}/{p.parent.name}/{p.name}"] = {
                "rows": tbl.replace_schema_metadata(None).to_pylist(),
                "fingerprint": fp,
            }
    for p in sorted((out / "energon").rglob("*")):
        if p.is_file() and p.name not in ("index.sqlite", "index.uuid"):  # energon writes those anew
            snap[str(p.relative_to(out))] = _sha(p)
    snap["store"] = sorted(p.name for p in (out / "store").glob("??/*"))
    snap["upstream"] = sorted(p.name for p in (out / "store" / "upstream").rglob("*.json"))
    return snap


def diff(expected: dict[str, Any], got: dict[str, Any]) -> list[str]:
    return [k for k in sorted(set(expected) | set(got)) if expected.get(k) != got.get(k)]


def is_temp(path: Path) -> bool:
    return ".tmp-" in path.name or path.name.endswith(".tmp")


def check_outputs(out: Path) -> dict[str, int]:
    """Nothing partial under a final name; returns counts of what is left under temporary names."""
    left = {"temp_files": 0, "staging_dirs": 0, "incoming": 0}
    if not out.exists():
        return left
    for p in out.rglob("*"):
        if p.is_file() and is_temp(p):
            left["temp_files"] += 1
    for p in (out / "manifests").rglob("*.parquet"):
        if not is_temp(p):
            pq.read_table(p)  # a cut Parquet file has no footer: this raises
    store = out / "store"
    for p in store.glob("??/*"):
        if not is_temp(p):
            assert _sha(p) == p.name, f"partial store object {p}"
    for p in (store / "upstream").rglob("*.json"):
        if not is_temp(p):
            entry = json.loads(p.read_text())
            sha = entry["sha256"]
            assert (store / sha[:2] / sha).is_file(), f"{p} names a missing object"
    left["incoming"] = (
        sum(1 for _ in (store / ".incoming").glob("*")) if (store / ".incoming").is_dir() else 0
    )
    energon = out / "energon"
    if energon.is_dir():
        for d in energon.iterdir():
            if d.is_dir() and d.name.endswith(".staging"):
                left["staging_dirs"] += 1
            elif d.is_dir() and not d.name.startswith("."):  # a published dataset is complete
                listing = json.loads((d / "vlmforge-shards.json").read_text())
                assert (d / ".nv-meta" / ".info.json").is_file() and (d / ".nv-meta" / "split.yaml").is_file()
                for e in listing:
                    assert _sha(d / e["shard"]) == e["sha256"], (
                        f"published shard {d.name}/{e['shard']} changed"
                    )
        if (energon / "metadataset.yaml").exists():
            assert yaml.safe_load((energon / "metadataset.yaml").read_text())["splits"]
    for p in [*out.glob("runs/*.json"), *out.glob("quality/*/*.json")]:
        if not is_temp(p):
            json.loads(p.read_text())
    return left


def stored_upstream(out: Path) -> set[str]:
    """Names of the remote objects in the store's upstream index (fetched and stored)."""
    names = set()
    for p in (out / "store" / "upstream").rglob("*.json"):
        if not is_temp(p):
            names.add(json.loads(p.read_text())["upstream"].rsplit("/", 1)[-1])
    return names


# ------------------------------------------------------------------------------------------- the tests


@dataclass
class KillPoint:
    round: int
    stage: str
    event: int  # the run was killed at event ``event`` of ``stage`` (``flows/runtime/faults.py``)
    after_s: float  # seconds after the process started
    store_objects: int


def kill_points(events: list[str], rng: random.Random) -> list[tuple[str, int]]:
    """Seeded kill points: up to ``KILLS_PER_STAGE`` distinct events of each stage of the reference run."""
    by_stage: dict[str, set[int]] = {}
    for event in events:
        stage, _, n = event.rpartition(":")
        by_stage.setdefault(stage, set()).add(int(n))
    points = []
    for stage in STAGES:
        seen = sorted(by_stage.get(stage, ()))
        assert seen, f"the reference run reported no {stage} event: {events}"
        points += [(stage, n) for n in sorted(rng.sample(seen, min(KILLS_PER_STAGE, len(seen))))]
    return points


def _kill_round(w: World, out: Path, log: Path, rnd: int, stage: str, n: int) -> KillPoint:
    """A run that SIGKILLs itself (driver, Ray head, workers) at event ``n`` of ``stage``; asserts it did."""
    t0 = time.time()
    proc = start_run(w, out, log, **{KILL_ENV: f"{stage}:{n}"})
    try:
        rc = proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        kill_session(proc)
    after = time.time() - t0
    text = log.read_text(errors="replace")
    assert rc == -signal.SIGKILL, (
        f"round {rnd} ({stage}:{n}) exited {rc} instead of being killed:\n{text[-3000:]}"
    )
    assert text.count(KILL_MARK) == 1 and f"{KILL_MARK} {stage}:{n}\n" in text, text[-3000:]
    objects = sum(1 for p in (out / "store").glob("??/*") if not is_temp(p))
    return KillPoint(rnd, stage, n, round(after, 2), objects)


# Each run has its own hang guard (RUN_TIMEOUT_S); the test's limit is their sum (reference, every round, the
# final rerun), so a loaded machine makes this test slower, never red (a clean clone with a CPU burner and a
# concurrent test suite took 20 min where a quiet one takes 8).
@pytest.mark.timeout(RUN_TIMEOUT_S * (len(STAGES) * KILLS_PER_STAGE + 2))
def test_sigkill_at_seeded_points_of_every_stage_then_rerun_gives_the_same_bytes(world: World) -> None:
    w = world
    planned = kill_points(w.ref_events, random.Random(SEED))
    out = w.root / "killed"
    logs = w.root / "killed-logs"
    logs.mkdir()
    t_start = time.time()
    points: list[KillPoint] = []
    fetched_when_stored: dict[str, int] = {}
    for rnd, (stage, n) in enumerate(planned, start=1):
        if stage in REDONE_STAGES:
            shutil.rmtree(out / "runs" / "current", ignore_errors=True)
        points.append(_kill_round(w, out, logs / f"round-{rnd:02d}.log", rnd, stage, n))
        check_outputs(out)  # after every kill: nothing partial under a final name
        for name in stored_upstream(out):  # once stored, never fetched again (checked at the end)
            fetched_when_stored.setdefault(name, w.srv.completed(f"/media/{name}"))
    log = logs / "final.log"
    proc = start_run(w, out, log)
    wait_run(proc, log)
    left = check_outputs(out)
    got = snapshot(out)
    differing = diff(w.ref_snapshot, got)
    refetched = {n: w.srv.completed(f"/media/{n}") - c for n, c in fetched_when_stored.items()}
    ref_rows = sum(len(v["rows"]) for k, v in w.ref_snapshot.items() if k.startswith("manifests/samples/"))
    rows = sum(len(v["rows"]) for k, v in got.items() if k.startswith("manifests/samples/"))
    by_stage = {s: sum(1 for p in points if p.stage == s) for s in STAGES}
    figures = {
        "kill_points": len(points),
        "survived": len(points) if not differing else 0,
        "by_stage": by_stage,
        "rows": rows,
        "rows_lost": ref_rows - rows,
        "bytes_equal": not differing,
        "refetched_objects": sum(1 for v in refetched.values() if v),
        "stored_before_a_kill": len(fetched_when_stored),
        "leftover_temp": left,
        "reference_run_s": round(w.ref_seconds, 1),
        "reference_events": w.ref_events,
        "seconds": round(time.time() - t_start, 1),
        "points": [asdict(p) for p in points],
    }
    record_figures("sigkill", figures)
    print(json.dumps({k: v for k, v in figures.items() if k != "points"}, indent=1))
    assert not differing, f"outputs differ from an uninterrupted run: {differing[:10]}"
    assert rows == ref_rows
    assert all(by_stage[s] for s in STAGES), by_stage
    assert not any(refetched.values()), f"objects fetched again after they were stored: {refetched}"
    assert fetched_when_stored, "no kill landed after a fetch: the fetch property proves nothing"


SITECUSTOMIZE = r'''
"""Test-only fault injection (tests/reliability/test_faults.py): SIGKILL the Ray worker running a batch or a
publish,
once per marker, in the middle of the task. Loaded by every Python process of the run under test."""
import os, signal, sys
from pathlib import Path

_DIR = Path(os.environ["VLMFORGE_FAULT_DIR"])


def _once(name):
    marker = _DIR / name
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.fsync(fd)
    os.close(fd)
    return True


def _patch_build_batch(mod):
    original = mod.write_records_part

    def write_records_part(layout, subset, index, records, fingerprint):
        path = original(layout, subset, index, records, fingerprint)
        # media and records parts are committed, the samples part (the completion marker) is not
        if subset == "remote_photos" and index == 1 and _once("batch-remote_photos-1"):
            os.kill(os.getpid(), signal.SIGKILL)
        return path

    mod.write_records_part = write_records_part


def _patch_shards(mod):
    original = mod.TarOut.add

    def add(self, sample):
        original(self, sample)
        mid = self.path.name.startswith("train-photo_vqa") and self.offset > 200_000
        if mid and _once("publish-photo_vqa"):
            os.kill(os.getpid(), signal.SIGKILL)  # mid-shard, in the staging folder

    mod.TarOut.add = add


_PATCHES = {"vlmforge.tasks.batch.write": _patch_build_batch, "vlmforge.tasks.publish.tar": _patch_shards}


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name not in _PATCHES:
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''


def test_a_ray_worker_killed_mid_task_is_retried_and_the_run_ends_the_same(world: World) -> None:
    w = world
    hook = w.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    markers = w.root / "markers"
    markers.mkdir()
    out, log = w.root / "worker-killed", w.root / "worker-killed.log"
    t0 = time.time()
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    proc = start_run(w, out, log, "ray", PYTHONPATH=path, VLMFORGE_FAULT_DIR=str(markers))
    wait_run(proc, log)
    faults = sorted(p.name for p in markers.iterdir())
    run = flow_run_since(w, t0)
    assert run is not None
    attempts = {tr["name"]: tr["run_count"] for tr in task_runs(w, run["id"])}
    left = check_outputs(out)
    differing = diff(w.ref_snapshot, snapshot(out))
    figures = {
        "faults_injected": len(faults),
        "faults": faults,
        "bytes_equal": not differing,
        "task_run_counts": {k: v for k, v in attempts.items() if v != 1},
        "leftover_temp": left,
        "seconds": round(time.time() - t0, 1),
    }
    record_figures("worker_kill", figures)
    print(json.dumps(figures, indent=1))
    assert faults == ["batch-remote_photos-1", "publish-photo_vqa"], faults  # both workers were killed
    assert not differing, f"outputs differ from an uninterrupted run: {differing[:10]}"


def _mount_tmpfs(where: Path, size: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, check=False
    )
    return res.returncode == 0


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _published(out: Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): _sha(p)
        for p in sorted((out / "energon").rglob("*"))
        if p.is_file() and not any(part.endswith((".staging", ".old")) for part in p.parts)
    }


def test_disk_full_stops_with_a_clear_error_keeps_the_published_data_and_resumes(world: World) -> None:
    w = world
    vol = w.root / "vol"
    size = 64 * 1024**2
    if not _mount_tmpfs(vol, size):
        pytest.skip("cannot mount a size-limited tmpfs here (needs root and CAP_SYS_ADMIN)")
    t0 = time.time()
    try:
        out = vol / "out"
        shutil.copytree(w.reference, out, symlinks=True)  # a previously published output folder
        # without its records of what is current (OUT/runs/current, tasks/publish/current.py), as an output
        # of an earlier vlmforge: its subsets are gated and published again, and the republish fills the disk
        shutil.rmtree(out / "runs" / "current")
        published = _published(out)
        ballast = vol / "ballast"
        with ballast.open("wb") as f:  # leave 256 KiB: a shard of the republish does not fit
            chunk = b"\0" * (1 << 20)
            while _free(vol) > (1 << 20) + 256 * 1024:
                f.write(chunk)
                f.flush()
            f.write(b"\0" * max(0, _free(vol) - 256 * 1024))
        log = w.root / "disk-full.log"
        # --no-disk-check: the check before start-up refuses this run (tests/flows/test_disk_check.py); what
        # is tested here is a disk that fills while the run writes
        proc = start_run(w, out, log, extra=("--no-disk-check",))
        rc = proc.wait(timeout=RUN_TIMEOUT_S)
        kill_session(proc)
        text = log.read_text(errors="replace")
        tail = " ".join(line.strip() for line in text.splitlines()[-8:])
        # 1: the subsets that hit the full disk were held back, named in the summary; 2: a write of the
        # driver itself failed: the CLI printed the one-line OutputFullError (after Prefect's traceback log)
        assert rc in (1, 2), text[-3000:]
        assert "no space left on the output volume" in tail or "not published" in tail, tail
        errors: list[str] = []
        if rc == 1:
            runs = sorted((out / "runs").glob("*.json"), key=lambda p: p.stat().st_mtime)
            summary = json.loads(runs[-1].read_text())["summary"]
            errors = [s["error"] for s in summary["subsets"] if s["error"]]
            assert errors and all("no space left on the output volume" in e for e in errors), errors
        check_outputs(out)
        assert _published(out) == published  # nothing published was touched
        ballast.unlink()
        log2 = w.root / "disk-full-resume.log"
        proc = start_run(w, out, log2)
        wait_run(proc, log2)
        left = check_outputs(out)
        differing = diff(w.ref_snapshot, snapshot(out))
        figures = {
            "faults_injected": 1,
            "exit_code_when_full": rc,
            "error_tail": tail[-300:],
            "subset_errors": errors,
            "published_intact": True,
            "bytes_equal": not differing,
            "leftover_temp": left,
            "seconds": round(time.time() - t0, 1),
        }
        record_figures("disk_full", figures)
        print(json.dumps(figures, indent=1))
        assert not differing, f"outputs differ from an uninterrupted run: {differing[:10]}"
    finally:
        subprocess.run(["umount", "-l", str(vol)], check=False)
