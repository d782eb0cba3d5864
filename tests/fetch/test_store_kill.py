"""A process killed between writing a store object (or an upstream-index entry) and renaming it into place
leaves nothing in the store's object folders or its upstream index: every name there is whole, and a rerun
lists exactly the names of an uninterrupted run (the SIGKILL fault test compares those listings)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Stores one object and records its upstream entry; with KILL_AT_REPLACE=N, SIGKILLs itself at the N-th
# rename into place (1: the object's, 2: the index entry's), after the temporary file is written whole.
SCRIPT = r"""
import os, signal, sys
from vlmforge.tasks.storage import ContentStore

kill_at = int(os.environ.get("KILL_AT_REPLACE", "0"))
calls = [0]
real_replace = os.replace

def replace(src, dst):
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    real_replace(src, dst)

os.replace = replace
store = ContentStore(sys.argv[1])
sha = store.put(b"an image's bytes")
store.record("https://example.invalid/a.jpg", {"sha256": sha, "bytes": 16})
"""


def run(script: Path, store: Path, kill_at: int) -> int:
    env = os.environ | {"KILL_AT_REPLACE": str(kill_at)}
    return subprocess.run([sys.executable, str(script), str(store)], env=env, check=False).returncode


def listing(store: Path) -> list[str]:
    """What the fault test snapshots: the names in the object folders and in the upstream index."""
    objects = sorted(p.relative_to(store).as_posix() for p in store.glob("??/*"))
    index = sorted(p.relative_to(store).as_posix() for p in (store / "upstream").rglob("*"))
    return objects + index


@pytest.mark.parametrize("kill_at", [1, 2], ids=["before the object's rename", "before the entry's rename"])
def test_a_write_killed_before_its_rename_leaves_no_name_in_the_store(tmp_path: Path, kill_at: int) -> None:
    script = tmp_path / "put.py"
    script.write_text(SCRIPT)
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
