"""A process killed between writing a file whole under its temporary name and renaming it into place:
- the store's object folders and upstream index hold no name of it, and a rerun lists exactly the names of an
  uninterrupted run (the SIGKILL fault test compares those listings);
- a user's own DuckDB glob over the manifests (``**/*.parquet``) never picks its temporary file up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

# With KILL_AT_REPLACE=N, the script SIGKILLs itself at its N-th rename into place, after the temporary file
# is written whole. Store: 1 is the object's rename, 2 the index entry's.
KILLER = r"""
import os, signal, sys

kill_at = int(os.environ.get("KILL_AT_REPLACE", "0"))
calls = [0]
real_replace = os.replace

def replace(src, dst):
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)

os.replace = replace
"""
STORE = (
    KILLER
    + r"""
from vlmforge.tasks.storage import ContentStore

store = ContentStore(sys.argv[1])
sha = store.put(b"an image's bytes")
store.record("https://example.invalid/a.jpg", {"sha256": sha, "bytes": 16})
"""
)
# Manifests: part 0 is committed, the kill lands at part 1's rename (KILL_AT_REPLACE=2).
MANIFESTS = (
    KILLER
    + r"""
from vlmforge.schemas.tables import SAMPLES, empty_row
from vlmforge.tasks.manifests import OutputLayout, write_part

layout = OutputLayout(sys.argv[1])
for index in (0, 1):
    row = {"subset": "a", "line": index, "status": "ok", "n_images": 0, "n_videos": 0}
    write_part(layout, "samples", "a", index, [empty_row(SAMPLES) | row])
"""
)


def run(script: Path, where: Path, kill_at: int) -> int:
    env = os.environ | {"KILL_AT_REPLACE": str(kill_at)}
    return subprocess.run([sys.executable, str(script), str(where)], env=env, check=False).returncode


def listing(store: Path) -> list[str]:
    """What the fault test snapshots: the names in the object folders and in the upstream index."""
    objects = sorted(p.relative_to(store).as_posix() for p in store.glob("??/*"))
    index = sorted(p.relative_to(store).as_posix() for p in (store / "upstream").rglob("*"))
    return objects + index


@pytest.mark.parametrize("kill_at", [1, 2], ids=["before the object's rename", "before the entry's rename"])
def test_a_write_killed_before_its_rename_leaves_no_name_in_the_store(tmp_path: Path, kill_at: int) -> None:
    script = tmp_path / "put.py"
    script.write_text(STORE)
    clean = tmp_path / "clean"
    assert run(script, clean, 0) == 0
    expected = listing(clean)
    assert len([n for n in expected if "/" in n and not n.startswith("upstream/")]) == 1, expected

    killed = tmp_path / "killed"
    assert run(script, killed, kill_at) == -signal.SIGKILL
    assert all(name in expected for name in listing(killed)), listing(killed)
    # The killed write's whole temporary file is in the incoming folder (swept by age), not beside objects.
    assert list((killed / ".incoming").iterdir()), "the kill landed before any temporary file was written"

    assert run(script, killed, 0) == 0
    assert listing(killed) == expected


def test_a_users_duckdb_glob_over_the_manifests_skips_a_killed_parts_temporary_file(tmp_path: Path) -> None:
    script = tmp_path / "parts.py"
    script.write_text(MANIFESTS)
    out = tmp_path / "out"
    assert run(script, out, 2) == -signal.SIGKILL
    folder = out / "manifests" / "samples" / "subset=a"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["part-00000.parquet"]
    assert [p for p in folder.iterdir() if p.name.startswith(".")], "the kill left no temporary file to skip"
    glob = (out / "manifests" / "samples" / "**" / "*.parquet").as_posix()
    rows = duckdb.sql(f"SELECT line FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()
    assert rows == [(0,)]
