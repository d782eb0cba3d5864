"""A fetch killed with SIGKILL at any moment restarts and ends with the same store and outcomes as an
uninterrupted run; no partial file is ever under a final name; nothing that was stored is fetched again."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from http_fixture import Fault, HttpFixture

SCRIPT = r"""
import json, sys
from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.http.client import HttpOptions
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.fetch.outcomes import outcome_columns
from vlmforge.tasks.storage import ContentStore, atomic_write_text
from pathlib import Path

url, store, out, n, concurrency = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
source = {"kind": "http_files", "allow_private": True, "url": url}
recipe = parse_recipe({"subset": "s", "license": "CC0-1.0", "sources": [source]})
http = HttpOptions(backoff_base=0.01, retries=1)
opts = FetchKnobs(concurrency=concurrency, spill_bytes=20_000, http=http)
res = fetch_batch([f"{i:03d}.jpg" for i in range(n)], recipe, ContentStore(store), options=opts)
rows = [{"ref": r, "sha256": o.sha256, "bytes": o.nbytes} | outcome_columns(o)
        for r, o in res.outcomes.items()]
atomic_write_text(Path(out), json.dumps(rows, sort_keys=True))
"""


def body(i: int) -> bytes:
    # Some objects are above spill_bytes, so they stream through a temp file before their rename.
    return b"\xff\xd8\xff" + random.Random(i).randbytes(5_000 if i % 3 else 50_000)


def start(
    script: Path, srv: HttpFixture, store: Path, out: Path, n: int, concurrency: int
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(script), srv.url("/r/{name}"), str(store), str(out), str(n), str(concurrency)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def finish(proc: subprocess.Popen[bytes]) -> None:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()[-2000:]


def snapshot(store: Path) -> dict[str, bytes]:
    """Every file under a final name (objects and upstream index), excluding temp and incoming files."""
    files = {}
    for p in store.rglob("*"):
        rel = p.relative_to(store).as_posix()
        if p.is_file() and ".tmp-" not in p.name and not rel.startswith((".incoming", ".locks")):
            files[rel] = p.read_bytes()
    return files


def assert_no_partial_objects(store: Path) -> None:
    for rel, data in snapshot(store).items():
        if not rel.startswith("upstream/"):
            assert hashlib.sha256(data).hexdigest() == rel.rsplit("/", 1)[-1], f"partial object {rel}"


def indexed_paths(store: Path) -> set[str]:
    return {
        json.loads(p.read_bytes())["upstream"].rsplit("/", 1)[-1]
        for p in (store / "upstream").rglob("*.json")
    }


@pytest.fixture
def script(tmp_path: Path) -> Path:
    p = tmp_path / "fetch_job.py"
    p.write_text(SCRIPT)
    return p


def reference_run(script: Path, srv: HttpFixture, tmp_path: Path, n: int) -> tuple[dict[str, bytes], str]:
    store, out = tmp_path / "ref-store", tmp_path / "ref.json"
    finish(start(script, srv, store, out, n, 4))
    return snapshot(store), out.read_text()


def test_kill_mid_body_then_resume(script: Path, tmp_path: Path) -> None:
    n = 24
    with HttpFixture() as srv:
        for i in range(n):
            srv.add(f"/r/{i:03d}.jpg", body(i))
        expected_store, expected_rows = reference_run(script, srv, tmp_path, n)
        srv.reset_log()
        srv.fault("/r/010.jpg", Fault("hang", delay=60))
        store, out = tmp_path / "store", tmp_path / "out.json"
        proc = start(script, srv, store, out, n, 1)  # one at a time: the kill lands after 000..009
        assert srv.state.hang_reached.wait(60), "the job never reached the hanging reference"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        srv.state.release.set()
        assert not out.exists()
        assert_no_partial_objects(store)
        stored_before = indexed_paths(store)
        assert stored_before == {f"{i:03d}.jpg" for i in range(10)}
        srv.fault("/r/010.jpg", None)
        finish(start(script, srv, store, out, n, 4))
        assert snapshot(store) == expected_store
        assert out.read_text() == expected_rows
        for i in range(n):
            assert srv.completed(f"/r/{i:03d}.jpg") == 1  # fetched exactly once across kill and resume


@pytest.mark.slow
def test_kill_at_random_moments(script: Path, tmp_path: Path) -> None:
    n = 60
    rng = random.Random(4)
    with HttpFixture() as srv:
        for i in range(n):
            srv.add(f"/r/{i:03d}.jpg", body(i), Fault("delay", delay=0.02))
        expected_store, expected_rows = reference_run(script, srv, tmp_path, n)
        srv.reset_log()
        store, out = tmp_path / "store", tmp_path / "out.json"
        fetched_when_stored: dict[str, int] = {}
        # Kills land at events, not at times: when a run's Nth request reaches the server (after 20: at least
        # 16 objects are stored, since a fetch thread stores its object before it asks for the next; after a
        # few: with bodies in flight), and right after the start (during start-up, before any fetch).
        for kill_at in (20, rng.randint(1, 8), 0):
            seen = len(srv.requests())
            proc = start(script, srv, store, out, n, 4)
            while len(srv.requests()) - seen < kill_at and proc.poll() is None:
                time.sleep(0.005)  # polling an event's count: how long it takes changes nothing
            assert proc.poll() is None, "the job ended before its kill point"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert_no_partial_objects(store)
            # A body the server finished sending may still die with the client before it is stored, so
            # the property is: once stored, never fetched again (not: every body sent exactly once).
            for name in indexed_paths(store):
                fetched_when_stored.setdefault(name, srv.completed(f"/r/{name}"))
        finish(start(script, srv, store, out, n, 4))
        assert snapshot(store) == expected_store
        assert out.read_text() == expected_rows
        assert fetched_when_stored, "no kill landed after a fetch: the test proves nothing"
        for name, count in fetched_when_stored.items():  # what was stored before a kill was never refetched
            assert srv.completed(f"/r/{name}") == count
