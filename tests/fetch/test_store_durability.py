"""The fetch stage stores originals without a sync, so a power loss may leave one short or empty under its
content name. Such an object is never trusted: an upstream-index hit is hashed before it is answered (a
damaged object is removed and fetched again), a write that finds another size under the name replaces it,
and a durable write of an object already there leaves it whole. Fetched bytes reach the media step in
memory, not read back from the store."""

from __future__ import annotations

import random
from pathlib import Path

from http_fixture import HttpFixture

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch, read_outcome
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.storage import ContentStore, sha256_bytes

BODY = b"\xff\xd8\xff" + random.Random(7).randbytes(30_000)


def _fetch(srv: HttpFixture, store: ContentStore, spill_bytes: int = 8 << 20) -> object:
    source = {"kind": "http_files", "allow_private": True, "url": srv.url("/m/{name}")}
    recipe = parse_recipe({"subset": "s", "license": "CC0-1.0", "sources": [source]})
    res = fetch_batch(["a.jpg"], recipe, store, options=FetchKnobs(concurrency=1, spill_bytes=spill_bytes))
    return res.outcomes["a.jpg"]


def test_a_cut_short_object_under_its_name_is_fetched_again(tmp_path: Path) -> None:
    store = ContentStore(str(tmp_path / "store"))
    sha = sha256_bytes(BODY)
    with HttpFixture() as srv:
        srv.add("/m/a.jpg", BODY)
        first = _fetch(srv, store)
        assert first.ok and first.sha256 == sha and not first.cached
        # what a power loss can leave of an unsynced write: the name, with only part of the bytes
        Path(store.path(sha)).write_bytes(BODY[: len(BODY) // 3])
        again = _fetch(srv, store)
        assert again.ok and not again.cached, "a damaged object must not answer from the index"
        assert srv.completed("/m/a.jpg") == 2
        assert Path(store.path(sha)).read_bytes() == BODY
        assert read_outcome(again, store) == BODY
        third = _fetch(srv, store)  # whole again: answered from the index, checked, nothing fetched
        assert third.cached and read_outcome(third, store) == BODY and srv.completed("/m/a.jpg") == 2


def test_a_spilled_object_replaces_a_cut_short_one(tmp_path: Path) -> None:
    store = ContentStore(str(tmp_path / "store"))
    sha = sha256_bytes(BODY)
    Path(store.path(sha)).parent.mkdir(parents=True)
    Path(store.path(sha)).write_bytes(b"")  # an empty file under the name, no index entry
    with HttpFixture() as srv:
        srv.add("/m/a.jpg", BODY)
        outcome = _fetch(srv, store, spill_bytes=1_000)  # streamed through a temp file
        assert outcome.ok and outcome.held is None
        assert read_outcome(outcome, store) == BODY == Path(store.path(sha)).read_bytes()


def test_fetched_bytes_reach_the_media_step_in_memory_once(tmp_path: Path) -> None:
    store = ContentStore(str(tmp_path / "store"))
    with HttpFixture() as srv:
        srv.add("/m/a.jpg", BODY)
        outcome = _fetch(srv, store)
    path = Path(store.path(sha256_bytes(BODY)))
    path.rename(path.with_name("moved"))  # a read from the store would now fail
    assert read_outcome(outcome, store) == BODY
    path.with_name("moved").rename(path)
    assert read_outcome(outcome, store) == BODY  # taken once: the second read is the store's


def test_a_durable_put_rewrites_a_short_object_and_keeps_a_whole_one(tmp_path: Path) -> None:
    store = ContentStore(str(tmp_path / "store"))
    sha = store.put(BODY, durable=False)
    Path(store.path(sha)).write_bytes(BODY[:10])
    assert store.put(BODY, sha) == sha
    assert Path(store.path(sha)).read_bytes() == BODY
    inode = Path(store.path(sha)).stat().st_ino
    assert store.put(BODY, sha) == sha and Path(store.path(sha)).stat().st_ino == inode  # synced in place
