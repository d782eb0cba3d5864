"""``vlmforge store clean OUT`` (issue 43 item 10): what in the media store no manifest of OUT references is
listed with its size, ``--delete`` removes exactly that (the object and its upstream-index entry), a run
holding OUT's lock makes it refuse in one line (exit 2), and a rerun afterwards publishes the same bytes
without fetching anything. Real CLI, local executor, the session's Prefect server, a loopback HTTP source."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import tree_hashes
from http_fixture import HttpFixture
from PIL import Image

from vlmforge.flows.runtime.run_lock import run_lock
from vlmforge.tasks.ops import plan_clean, remove_unreferenced
from vlmforge.tasks.storage import ContentStore

CLI = [sys.executable, "-m", "vlmforge.flows.cli"]
FETCHED = "fetched"  # a subset whose two images come over HTTP: the store gets an upstream index


def _jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((64, 48), 40 + seed).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=900)


def _store_files(store: Path) -> dict[str, str]:
    return tree_hashes(store)  # every file of the store (object, index entry, lock) by path


@pytest.fixture(scope="module")
def ran(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from vlmforge.flows.runtime.embedded import configured_api_url

    root = tmp_path_factory.mktemp("store-clean")
    release, recipes, out = root / "release", root / "recipes", root / "out"
    assert _cli("sample-release", str(release)).returncode == 0
    folder = release / FETCHED
    folder.mkdir()
    rows = [
        {
            "id": f"f-{i}",
            "messages": [
                {"role": "user", "content": ["What?", {"type": "image", "image": f"{i}.jpg"}]},
                {"role": "assistant", "content": "Noise."},
            ],
        }
        for i in range(2)
    ]
    (folder / f"{FETCHED}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipes.mkdir()
    with HttpFixture() as srv:
        for i in range(2):
            srv.add(f"/m/{i}.jpg", _jpeg(i))
        source = {"kind": "http_files", "url": srv.url("/m/{name}"), "allow_private": True}
        (recipes / f"{FETCHED}.yaml").write_text(
            json.dumps({"subset": FETCHED, "license": "MIT", "sources": [source]})
        )
        env = os.environ | {"PREFECT_API_URL": str(configured_api_url()), "PYTHONUNBUFFERED": "1"}
        run = ["run", str(release), "--out", str(out), "--recipes", str(recipes), "--executor", "local"]
        first = _cli(*run, env=env)
        assert first.returncode in (0, 1), first.stderr[-3000:]  # 1: the sample's bad_rows is not published
        assert srv.completed("/m/0.jpg") == 1 and srv.completed("/m/1.jpg") == 1
        yield {"out": out, "store": out / "store", "run": run, "env": env, "srv": srv, "first": first}


@pytest.mark.slow
def test_store_clean_lists_deletes_only_the_unreferenced_and_a_rerun_is_the_same(ran: dict[str, Any]) -> None:
    out, store, srv = ran["out"], ran["store"], ran["srv"]
    assert any((store / "upstream").rglob("*.json")), "the fetched subset left no upstream index"
    clean = _cli("store", "clean", str(out))
    assert clean.returncode == 0, clean.stderr
    assert " 0 of " in clean.stdout.splitlines()[0], clean.stdout  # every object is referenced

    before = _store_files(store)
    planted = b"nobody references this " * 300
    content = ContentStore(str(store))
    sha = content.put(planted)
    content.record("https://example.invalid/planted.jpg", {"sha256": sha, "bytes": len(planted)})
    index_entry = next(p for p in (store / "upstream").rglob("*.json") if sha in p.read_text())

    listed = _cli("store", "clean", str(out))
    assert listed.returncode == 0, listed.stderr
    summary, *table = listed.stdout.splitlines()
    assert summary.startswith(
        f"store {store.resolve()}: 1 of {len(_objects(before)) + 1} objects ({len(planted)} of "
    )
    rows = [line.split() for line in table if line.strip() and not set(line.strip()) <= {"─"}][1:]
    assert rows == [[sha[:16], str(len(planted)), "https://example.invalid/planted.jpg"]], listed.stdout
    assert all(len(line) <= 80 for line in listed.stdout.splitlines()[1:]), listed.stdout
    assert (store / sha[:2] / sha).exists()  # a dry run removes nothing

    with run_lock(str(out)):
        refused = _cli("store", "clean", str(out), "--delete")
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert len(refused.stderr.strip().splitlines()) == 1 and "in use by a vlmforge run" in refused.stderr
    assert (store / sha[:2] / sha).exists() and index_entry.exists()

    deleted = _cli("store", "clean", str(out), "--delete")
    assert deleted.returncode == 0, deleted.stderr
    assert f"removed 1 objects ({len(planted)} bytes)" in deleted.stdout, deleted.stdout
    assert not (store / sha[:2] / sha).exists() and not index_entry.exists()
    assert _store_files(store) == before  # nothing else was touched

    # The same command again, its datasets not taken as current (their records removed), so every subset is
    # gated and published anew from the store's objects: the same bytes, nothing fetched.
    energon = tree_hashes(out / "energon")
    shutil.rmtree(out / "runs" / "current")
    srv.reset_log()
    again = _cli(*ran["run"], env=ran["env"])
    assert again.returncode == ran["first"].returncode, again.stderr[-3000:]
    for subset in ("photo_vqa", "video_qa", "multi_image", FETCHED):  # gated again, not "unchanged"
        assert re.search(rf"^\s*{subset}\s.*\bpassed\b", again.stdout, re.M), again.stdout[-3000:]
    assert srv.requests() == []
    assert tree_hashes(out / "energon") == energon
    assert _store_files(store) == before


def _objects(files: dict[str, str]) -> list[str]:
    return [p for p in files if not p.startswith(("upstream/", ".")) and p.count("/") == 1]


def test_symlinks_in_the_store_are_neither_followed_nor_removed(tmp_path: Path) -> None:
    out, store, outside = tmp_path / "out", tmp_path / "store", tmp_path / "outside"
    (out / "manifests").mkdir(parents=True)
    content = ContentStore(str(store))
    mine = content.put(b"unreferenced")
    outside.mkdir()
    far = "ab" + "0" * 62
    (outside / far).write_bytes(b"not the store's")
    (store / "ab").symlink_to(outside, target_is_directory=True)  # a folder of the store that leads out
    linked = "cd" + "1" * 62
    (store / "cd").mkdir()
    (store / "cd" / linked).symlink_to(outside / far)  # an object name that is a link out

    plan = plan_clean(str(store), [str(out)])
    assert [c.sha256 for c in plan.candidates] == [mine]
    assert remove_unreferenced(plan) == (1, len(b"unreferenced"))
    assert (outside / far).read_bytes() == b"not the store's" and (store / "cd" / linked).is_symlink()
    assert not (store / mine[:2] / mine).exists()


def test_a_store_that_is_not_local_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "out" / "manifests").mkdir(parents=True)
    done = _cli("store", "clean", str(tmp_path / "out"), "--store", "s3://bucket/store", "--delete")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "local store only" in done.stderr, done.stderr
    assert not (tmp_path / "out" / ".vlmforge-run.lock").exists()  # the lock was released
