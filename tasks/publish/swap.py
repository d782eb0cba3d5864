"""The staged publish: a dataset is built in a hidden staging folder and swapped into place in one step.

``dest`` is built in ``dest.parent/.<dest.name>.staging`` and swapped with the published version in one
``renameat2(RENAME_EXCHANGE)`` (two renames where that is not available; a leftover ``.<dest.name>.old`` is
put back by the next call). A loader never sees a partial dataset: ``dest`` is the previous complete
dataset or the new complete one.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

__all__ = ["fsync_dir", "recover_old", "remove", "staging_path", "swap_into_place"]


def staging_path(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.staging"


def _old_path(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.old"


def remove(path: Path) -> None:
    """Remove a file, a symlink or a folder tree; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def fsync_dir(path: Path) -> None:
    """Make a folder's entries durable (best effort: some filesystems refuse it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return int(renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)) == 0


def recover_old(dest: Path) -> None:
    """Undo a publish interrupted between its two renames (only on filesystems without RENAME_EXCHANGE)."""
    old = _old_path(dest)
    if old.is_dir() and not dest.exists() and (old / ".nv-meta" / ".info.json").is_file():
        os.replace(old, dest)
    remove(old)


def swap_into_place(staging: Path, dest: Path, *, fsync: bool) -> None:
    """Publish the complete ``staging`` folder as ``dest``; the previous version is removed."""
    if fsync:
        fsync_dir(staging)
    if dest.exists() and _exchange(staging, dest):
        remove(staging)  # now the previous version
    else:
        old = _old_path(dest)
        if dest.exists() or dest.is_symlink():
            os.replace(dest, old)
        os.replace(staging, dest)
        remove(old)
    if fsync:
        fsync_dir(dest.parent)
