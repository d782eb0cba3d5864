"""Two processes whose batches name the same object fetch it once: the second waits on the store's
per-object lock while the first is mid-transfer, then finds the object in the store.

The order is forced by events, never by sleeps: the server holds the first transfer half-sent until the
second process reports (through its log record, sent over a pipe) that it is waiting on the lock."""

from __future__ import annotations

import logging
import multiprocessing as mp
import random
import threading
from multiprocessing.connection import Connection, wait
from pathlib import Path

from http_fixture import Fault, HttpFixture

from vlmforge.tasks.storage import ContentStore


class _SaysWaiting(logging.Handler):
    def __init__(self, conn: Connection) -> None:
        super().__init__(logging.DEBUG)
        self.conn = conn

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("waiting for the store lock"):
            self.conn.send("waiting")


def fetch_in_child(url: str, store: str, conn: Connection) -> None:
    """A worker process: one batch naming ``a.jpg``; sends "waiting" if the store lock makes it wait, then
    its outcome (sha256, cached)."""
    from vlmforge.schemas.recipes import parse_recipe
    from vlmforge.tasks.fetch.acquire import fetch_batch
    from vlmforge.tasks.fetch.options import FetchKnobs

    store_log = logging.getLogger("vlmforge.store")
    store_log.setLevel(logging.DEBUG)
    store_log.addHandler(_SaysWaiting(conn))
    source = {"kind": "http_files", "allow_private": True, "url": url}
    recipe = parse_recipe({"subset": "s", "license": "CC0-1.0", "sources": [source]})
    res = fetch_batch(["a.jpg"], recipe, ContentStore(store), options=FetchKnobs(concurrency=2))
    outcome = res.outcomes["a.jpg"]
    conn.send((outcome.status, outcome.sha256, outcome.cached))


def _start(url: str, store: Path) -> tuple[mp.process.BaseProcess, Connection]:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=fetch_in_child, args=(url, str(store), theirs), daemon=True)
    proc.start()
    theirs.close()
    return proc, ours


def test_two_processes_fetch_one_object_once(tmp_path: Path) -> None:
    body = b"\xff\xd8\xff" + random.Random(1).randbytes(40_000)
    store = tmp_path / "store"
    with HttpFixture() as srv:
        # The first request stops half-sent until released; any later one would be served at once.
        srv.add("/m/a.jpg", body, Fault("hang", times=1, delay=120))
        url = srv.url("/m/{name}")
        first, first_conn = _start(url, store)
        try:
            assert srv.state.hang_reached.wait(120), "the first process never reached the server"
            second, second_conn = _start(url, store)
            try:
                # The second process either says it waits on the lock (the fix) or answers without
                # waiting (it fetched the object itself: the race).
                assert wait([second_conn, second.sentinel], timeout=120), "the second process said nothing"
                said = second_conn.recv() if second_conn.poll() else None
                assert said == "waiting", f"the second process did not wait for the first's fetch: {said}"
                srv.state.release.set()
                first_answer = first_conn.recv()
                second_answer = second_conn.recv()
            finally:
                second.join(120)
        finally:
            srv.state.release.set()
            first.join(120)
        assert first.exitcode == 0 and second.exitcode == 0
        assert first_answer[:2] == second_answer[:2] and first_answer[0] == "ok"
        assert (first_answer[2], second_answer[2]) == (False, True)  # the second found it in the store
        assert len(srv.requests("/m/a.jpg")) == 1 and srv.completed("/m/a.jpg") == 1
    assert (store / first_answer[1][:2] / first_answer[1]).read_bytes() == body
    assert [p.name for p in (store / ".locks").iterdir()] == ["names"], "one lock file, not one per object"


def test_the_lock_excludes_threads_of_one_process_by_name(tmp_path: Path) -> None:
    """Threads of one process wait on a name another thread holds (each call opens the lock file itself),
    never on another name, and the store keeps one lock file whatever the number of names."""
    cs = ContentStore(str(tmp_path / "store"))
    waited: list[str] = []
    inner_done = threading.Event()

    def contender(name: str) -> None:
        with cs.lock(name, on_wait=lambda: waited.append(name)):
            pass

    with cs.lock("object:x"):
        other = threading.Thread(target=contender, args=("object:y",))
        other.start()
        other.join(60)
        assert not other.is_alive() and waited == [], "another name does not wait"
        same = threading.Thread(target=lambda: (contender("object:x"), inner_done.set()))
        same.start()
        while not waited:  # the contender reports its wait before it blocks
            same.join(0.01)
        assert waited == ["object:x"] and not inner_done.is_set(), "the same name waits for its holder"
    same.join(60)
    assert inner_done.is_set(), "released when the holder leaves"
    for i in range(50):
        with cs.lock(f"object:{i}"):
            pass
    assert [p.name for p in Path(cs.locks_dir()).iterdir()] == ["names"]
