"""What a hostile run must leave alone: the files an earlier run published for a good subset in the same OUT
(its shards under ``OUT/energon/<subset>/`` and its manifest partitions ``OUT/manifests/*/subset=<subset>/``),
by sha256."""

from __future__ import annotations

import hashlib
from pathlib import Path


def published_files(out: Path, subset: str) -> dict[str, str]:
    """sha256 of every file of ``subset``'s shards and manifest partitions, by path relative to ``out``."""
    roots = [out / "energon" / subset, *sorted((out / "manifests").glob(f"*/subset={subset}"))]
    found = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if p.is_file():
                found[str(p.relative_to(out))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def assert_published(files: dict[str, str], subset: str) -> None:
    """``files`` (from :func:`published_files`) hold both the subset's shards and its manifest rows."""
    assert any(k.startswith(f"energon/{subset}/") for k in files), sorted(files)
    assert any(k.startswith("manifests/") for k in files), sorted(files)
