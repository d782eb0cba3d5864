"""Filesystem helpers shared by the stages: fsspec access, atomic writes, the content-addressed store.

Every file the pipeline publishes is written to a temporary name in the same folder and renamed into
place, so a crash never leaves a partial file under a final name.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import struct
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
from fsspec import AbstractFileSystem

from .errors import OutputError

TMP_MARK = ".tmp-"
# Store sub-folders besides the <sha[:2]>/ object folders (names longer than two characters never clash).
INCOMING = ".incoming"  # partial downloads, published by rename
UPSTREAM_INDEX = "upstream"  # upstream locator -> object sha256, so nothing is fetched twice
LOCKS = ".locks"
LOCK_FILE = "names"  # in LOCKS: one file, a byte of it per locked name (ContentStore.lock)

log = logging.getLogger("vlmforge.store")


class OutputFullError(OutputError, OSError):
    """The output volume (or the store's) is full or over quota; the CLI reports it in one line. Committed
    work is kept, so a rerun resumes once space is freed. Still an ``OSError`` for callers catching one."""


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
SQLITE_FULL = 13  # sqlite3.SQLITE_FULL (a module constant only from Python 3.11)


def _sqlite_full(exc: BaseException) -> bool:
    """SQLite's own "database or disk is full" (SQLITE_FULL): how a full disk reaches energon's index."""
    return isinstance(exc, sqlite3.OperationalError) and (
        getattr(exc, "sqlite_errorcode", None) == SQLITE_FULL or "database or disk is full" in str(exc)
    )


def no_space(exc: BaseException, path: str) -> OutputFullError | None:
    """An :class:`OutputFullError` naming ``path`` when ``exc`` is a full-disk or quota error (an OS error or
    SQLite's), else None."""
    if isinstance(exc, OutputFullError):
        return None
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        why = exc.strerror
    elif _sqlite_full(exc):
        why = str(exc)
    else:
        return None
    return OutputFullError(
        f"no space left on the output volume writing {path} ({why}): free space and rerun the same "
        "command; committed work is kept and resumed"
    )


def url_to_fs(url: str, **storage_options: Any) -> tuple[AbstractFileSystem, str]:
    """Filesystem and path of a local path or fsspec URL (``file://``, ``s3://``, ``hf://``...)."""
    fs, path = fsspec.core.url_to_fs(url, **storage_options)
    return fs, path.rstrip("/") if path != "/" else path


def is_local(fs: AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def atomic_write_bytes(
    fs: AbstractFileSystem, path: str, data: bytes, *, durable: bool = True, tmp_dir: str | None = None
) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part.
    ``durable``: the data reach the disk before the rename, so a power loss cannot leave an empty file under
    the final name (a local write; object stores publish a PUT atomically). Skip that only for what a reader
    validates and can rebuild. ``tmp_dir``: where the temporary file lives (same filesystem as ``path``),
    when a process killed mid-write must leave nothing beside the final name (default: ``path``'s folder)."""
    parent = path.rsplit("/", 1)[0]
    if is_local(fs):
        # ".<name>.tmp-<uuid>": hidden, and never matched by a glob on the final names' suffix
        # (``*.parquet``, ``*.json``, ``*.yaml``), should a killed process leave it behind.
        tmp = f"{tmp_dir or parent}/.{path.rsplit('/', 1)[-1]}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            os.makedirs(parent, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            # A part written up to a full disk would keep its space and linger under its temporary name.
            with contextlib.suppress(OSError):
                os.remove(tmp)
            full = no_space(exc, path)
            if full is not None:
                raise full from exc
            raise
    else:  # object stores publish a PUT atomically
        fs.pipe_file(path, data)


def atomic_write_text(path: Path, text: str) -> None:
    fs, p = url_to_fs(str(path))
    atomic_write_bytes(fs, p, text.encode())


def read_text(path: str | Path, fs: AbstractFileSystem | None = None) -> str:
    """The UTF-8 text of the file ``path`` on ``fs`` (default: the local file system)."""
    data: bytes = (fs or fsspec.filesystem("file")).cat_file(str(path))
    return data.decode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ContentStore:
    """Media stored once by sha256 (``<root>/<sha[:2]>/<sha>``), whichever subsets reference them.

    ``sync_later``: durable writes are not synced one by one but all at once by :meth:`sync_pending`, which
    the batch calls before it writes the manifest part that marks it complete (the marker then never names
    an object a power loss could lose). One file-system sync a batch replaces a sync an image, each of which
    held the media step's thread for the disk's write latency."""

    def __init__(self, root: str, *, sync_later: bool = False) -> None:
        self.fs, self.root = url_to_fs(root)
        self.sync_later = sync_later
        self._pending = 0  # durable writes waiting for sync_pending

    def path(self, sha256: str) -> str:
        return f"{self.root}/{sha256[:2]}/{sha256}"

    def has(self, sha256: str) -> bool:
        return bool(self.fs.exists(self.path(sha256)))

    def put(self, data: bytes, sha256: str | None = None, *, durable: bool = True) -> str:
        """Store ``data`` as its object; returns its sha256 (``sha256``: already known, not hashed again).

        ``durable`` (every object a batch publishes): on disk when this returns, also when the object was
        already there, for an earlier writer may have stored it without a sync (the fetch stage's
        originals, see :mod:`.fetch.store_writes`); syncing a file already on disk is one cheap call.
        A local object whose size differs from ``data`` is one a power loss cut short: written again whole.
        """
        digest = sha256 or sha256_bytes(data)
        path = self.path(digest)
        if not self.local:
            if not self.has(digest):  # object stores publish a PUT atomically and durably
                atomic_write_bytes(self.fs, path, data)
            return digest
        later = durable and self.sync_later
        if later:
            self._pending += 1
        if _size(path) == len(data):
            if durable and not later:
                _sync_file(path)
            return digest
        atomic_write_bytes(self.fs, path, data, durable=durable and not later, tmp_dir=self._tmp_dir())
        return digest

    def sync_pending(self) -> None:
        """Bring every durable write made since the last call to disk: one ``syncfs`` of the store's file
        system (Linux), else ``os.sync``. Objects are renamed into place before they are synced, so a power
        loss before this call can leave one short under its name: :meth:`put` rewrites an object whose size
        is not its data's, and the fetch stage reads an object it did not write through :meth:`verified`."""
        if not self._pending or not self.local:
            self._pending = 0
            return
        _sync_file_system(self.root)
        self._pending = 0

    def verified(self, sha256: str) -> bytes | None:
        """The bytes of a local object when they hash to its name, else None (missing, or damaged: then the
        caller fetches it again, and :meth:`put_file` / :meth:`put` replace it whole; nothing is deleted).
        What the fetch stage reads from the store for an object it did not write in this batch goes
        through here: its originals are stored without a sync, so after a power loss one may be short,
        empty or zero-filled under its name, and it is never trusted unchecked."""
        path = self.path(sha256)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if sha256_bytes(data) == sha256:
            return data
        log.warning("store object %s is damaged (%d bytes, not its content): fetched again", path, len(data))
        return None

    def get(self, sha256: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path(sha256))
        return data

    # --- Used by the fetch stage (tasks/fetch/): objects streamed in, the upstream index, local locks. ---

    @property
    def local(self) -> bool:
        return is_local(self.fs)

    def _tmp_dir(self) -> str | None:
        """Where a local write's temporary file lives: the incoming folder, swept by age, so that a process
        killed mid-write leaves nothing in the object folders or the upstream index (every name there is a
        whole object or entry, and a rerun lists the same names as an uninterrupted run)."""
        return self.incoming_dir() if self.local else None

    def incoming_dir(self) -> str:
        """Local folder for partial downloads (same filesystem as the store when it is local, so publishing
        is a rename). Partial files never sit under a final ``<sha[:2]>/<sha>`` name."""
        if self.local:
            path = f"{self.root}/{INCOMING}"
        else:
            path = os.path.join(tempfile.gettempdir(), "vlmforge-incoming")
        os.makedirs(path, exist_ok=True)
        return path

    def put_file(self, local_path: str, sha256: str) -> str:
        """Publish a complete, already hashed local file as object ``sha256``; the file is consumed. Not
        synced (the fetch stage's originals, see :mod:`.fetch.store_writes`); a local object already there
        is replaced (it may be one a power loss damaged: :meth:`verified` sent the fetch stage here)."""
        final = self.path(sha256)
        try:
            if self.local:  # always replaced: a damaged object of the same size is mended by the rename
                os.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
                os.replace(local_path, final)
            elif not self.has(sha256):  # object stores publish a PUT atomically
                self.fs.put_file(local_path, final)
        finally:
            if os.path.exists(local_path):
                os.remove(local_path)
        return sha256

    def sweep_incoming(self, older_than_s: float = 6 * 3600) -> int:
        """Remove partial downloads left by killed runs (older than ``older_than_s``); returns the count."""
        folder = self.incoming_dir()
        cutoff = time.time() - older_than_s
        removed = 0
        for entry in os.scandir(folder):
            try:
                if entry.is_file() and entry.stat().st_mtime < cutoff:
                    os.remove(entry.path)
                    removed += 1
            except FileNotFoundError:  # another worker swept it first
                pass
        return removed

    def _index_path(self, key: str) -> str:
        h = hashlib.sha256(key.encode()).hexdigest()
        return f"{self.root}/{UPSTREAM_INDEX}/{h[:2]}/{h}.json"

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The upstream-index entry of ``key`` (an upstream locator), when its object is in the store."""
        try:
            raw = self.fs.cat_file(self._index_path(key))
            entry: dict[str, Any] = json.loads(raw)
        except (FileNotFoundError, ValueError):
            return None
        if entry.get("upstream") != key or not self.has(str(entry.get("sha256"))):
            return None
        return entry

    def record(self, key: str, entry: dict[str, Any]) -> None:
        """Map upstream locator ``key`` to a stored object (written after the object, atomically). Not
        synced to disk: an entry lost or emptied by a power loss fails ``lookup``'s checks and costs one
        refetch of an object that is stored already; the sync would cost a disk flush per object."""
        payload = {"upstream": key} | entry
        atomic_write_bytes(
            self.fs,
            self._index_path(key),
            json.dumps(payload, sort_keys=True).encode(),
            durable=False,
            tmp_dir=self._tmp_dir(),
        )

    def locks_dir(self) -> str:
        """Where a local store's lock files live: ``<store>/.locks``, shared by every process that sees the
        folder."""
        return f"{self.root}/{LOCKS}"

    @contextmanager
    def lock(self, name: str, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """An exclusive lock on ``name`` shared by the processes of this machine and their threads, so two
        workers do not fetch the same object or stream the same archive at once. ``on_wait`` is called (and
        a debug line logged) when another holder makes this call wait.

        One byte of one lock file (``<store>/.locks/names``), at an offset drawn from the name's sha256,
        locked with an open-file-description lock (Linux's ``F_OFD_SETLKW``): each call opens the file
        itself, so threads of one process exclude each other as processes do, and the kernel releases the
        lock when its holder's process dies, so a crashed holder never blocks anyone. The file is made once
        and never removed: a lock file made and removed per object left the store's file system a freed
        inode per object, which ext4 (without a journal) skips for a minute on every later file it makes,
        8% of a batch worker's CPU at 5,000 images. Two names share a byte with odds of 2^-60. An object
        store has no lock (nothing is written outside the store, and a bucket has no file lock): two
        workers may fetch one object twice, which costs the transfer, never correctness (the object's name
        is its sha256 and its upstream-index entry is the same)."""
        if not self.local:
            yield
            return
        folder = self.locks_dir()
        os.makedirs(folder, exist_ok=True)
        offset = int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
        fd = os.open(f"{folder}/{LOCK_FILE}", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not _byte_lock(fd, offset, wait=False):
                log.debug("waiting for the store lock on %s: another worker holds it", name)
                if on_wait is not None:
                    on_wait()
                _byte_lock(fd, offset, wait=True)
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file description releases its locks


def _byte_lock(fd: int, offset: int, wait: bool) -> bool:
    """Take an exclusive open-file-description lock on byte ``offset`` of ``fd``; False when ``wait`` is
    False and another open file description holds it."""
    flock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)  # struct flock, l_pid 0
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, flock)
    except OSError as exc:
        if not wait and exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _size(path: str) -> int | None:
    """The size of the local file ``path``, or None when there is none."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def _sync_file_system(folder: str) -> None:
    """Flush the dirty data of the file system holding ``folder`` (``syncfs``; ``os.sync`` where the C
    library has none)."""
    libc = ctypes.CDLL(None, use_errno=True)
    syncfs = getattr(libc, "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), folder)
    finally:
        os.close(fd)


def _sync_file(path: str) -> None:
    """Flush a local file's data to disk (cheap when nothing of it is waiting to be written)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
