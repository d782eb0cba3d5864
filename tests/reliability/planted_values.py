"""Finding a planted value (a secret, a masked location) wherever a whole run may have left it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def files_containing(root: Path, needle: bytes) -> list[str]:
    """Every regular file under ``root`` whose bytes hold ``needle`` (symlinks, unreadable files skipped)."""
    hits = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and needle in p.read_bytes():
                hits.append(str(p))
        except OSError:
            continue
    return hits


@contextmanager
def short_scratch(prefix: str) -> Iterator[Path]:
    """A short folder (Ray's socket paths live under it) for a run's temp files, Ray sessions and HOME."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
