"""Filesystem helpers shared by the stages: fsspec access, atomic writes, the content-addressed store.

Every file the pipeline publishes is written to a temporary name in the same folder and renamed into
place, so a crash never leaves a partial file under a final name.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

TMP_MARK = ".tmp-"


def url_to_fs(url: str, **storage_options: Any) -> tuple[AbstractFileSystem, str]:
    """Filesystem and path of a local path or fsspec URL (``file://``, ``s3://``, ``hf://``...)."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    return fs, path.rstrip("/") if path != "/" else path


def is_local(fs: AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def atomic_write_bytes(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part."""
    parent = path.rsplit("/", 1)[0]
    if is_local(fs):
        os.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/{TMP_MARK}{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    else:  # object stores publish a PUT atomically
        fs.pipe_file(path, data)


def atomic_write_text(path: Path, text: str) -> None:
    fs, p = url_to_fs(str(path))
    atomic_write_bytes(fs, p, text.encode())


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ContentStore:
    """Media stored once by sha256 (``<root>/<sha[:2]>/<sha>``), whichever subsets reference them."""

    def __init__(self, root: str) -> None:
        self.fs, self.root = url_to_fs(root)

    def path(self, sha256: str) -> str:
        return f"{self.root}/{sha256[:2]}/{sha256}"

    def has(self, sha256: str) -> bool:
        return bool(self.fs.exists(self.path(sha256)))

    def put(self, data: bytes, sha256: str | None = None) -> str:
        digest = sha256 or sha256_bytes(data)
        if not self.has(digest):
            atomic_write_bytes(self.fs, self.path(digest), data)
        return digest

    def get(self, sha256: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path(sha256))
        return data
