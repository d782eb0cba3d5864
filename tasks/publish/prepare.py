"""megatron-energon's own prepare step over a staged dataset: the ``.nv-meta`` index, split and info files.

Only split patterns matching at least one shard are passed (empty splits are omitted from ``split.yaml``):
Energon raises ``EmptyDatasetError`` for a split with an empty shard list and an
``AssertionError("Invalid split part")`` for a missing one, so callers must not load a missing split.
Prepare's failures (it calls ``sys.exit`` on duplicate keys and on a shard it cannot index) become
:class:`EnergonPrepareError`, or :class:`OutputFullError` when the disk was full.

Energon's prepare is not reproducible as it stands: its workers fill ``index.sqlite`` in the order they
finish, and ``index.uuid`` is a random uuid4. :func:`seal_index` then rewrites both, atomically: the
sqlite database rebuilt from the same schema with its rows in sorted order (same rows, same bytes), and the
uuid derived from the dataset's content (every shard's name and sha256, ``.info.json``, ``split.yaml`` and
the rebuilt index), so identical runs give byte-identical ``.nv-meta`` files and a changed dataset a new
uuid (Energon keys its join caches by it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ..storage import TMP_MARK, OutputFullError, no_space
from .samples import EnergonPrepareError

__all__ = [
    "PREPARE_WORKERS",
    "indexed_counts",
    "indexed_keys",
    "iter_indexed_keys",
    "run_prepare",
    "seal_index",
]

META = ".nv-meta"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
# The files the uuid is derived from, besides the shards (all written by Energon's prepare).
_UUID_INPUTS = (".info.json", "split.yaml", INDEX_SQLITE)


#: Workers of Energon's prepare by default: one, in this process (:mod:`.inline_pool`), however many shards.
#: Our scan takes ~0.8 s of CPU per 10,000-sample shard (:mod:`.shard_scan`), so a second worker no longer
#: pays for its fork of the whole (Ray worker) process: 200,000 text rows in 21 shards published in 74.6 s
#: end to end with one in-process worker against 76.8 s with two forked ones, at a peak tree RSS of 2.75
#: against 3.70 GB (``benchmarks/bench_run.py --text-rows 200000``).
PREPARE_WORKERS = 1


@contextlib.contextmanager
def _default_sigterm() -> Iterator[None]:
    """SIGTERM with its default action while Energon's prepare runs (main thread only).

    Prepare forks its workers and SIGTERMs them when it fails (e.g. on a full disk). A forked child inherits
    the caller's handler; a Ray worker's raises ``SystemExit``, which, delivered while the child is still in
    ``os.fork()``, sends the child back into the caller's own code as a second copy of the task, and the
    parent then waits for it forever. With the default action a terminated child simply ends.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield  # a handler installed outside Python cannot be restored; other threads cannot set one
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_prepare(
    root: Path,
    tar_names: list[str],
    patterns: Sequence[tuple[str, str]],
    workers: int,
    shard_sha256: Mapping[str, str] | None = None,
) -> None:
    """Energon's ``prepare_dataset`` over ``tar_names`` in ``root`` with (split, regex) ``patterns``, then
    :func:`seal_index` (``shard_sha256``: the shards' known hashes; None reads the shards to hash them)."""
    from .inline_pool import inline_single_worker
    from .shard_scan import OwnTarPreparator

    try:
        with _default_sigterm(), inline_single_worker():
            OwnTarPreparator.prepare_dataset(
                root, tar_names, split_parts_patterns=list(patterns), shuffle_seed=None, workers=workers
            )
    except (OSError, sqlite3.Error) as exc:  # a full disk reaches energon's index as SQLITE_FULL too
        full = no_space(exc, str(root))
        if full is None:
            raise
        raise full from exc
    except SystemExit as exc:  # energon calls sys.exit(1) on duplicate keys, and when a shard failed to index
        if _nearly_full(root):  # the failure was the disk's (logged by energon), not the samples'
            raise OutputFullError(
                f"no space left on the output volume while megatron-energon indexed {root}: free space and "
                "rerun the same command; committed work is kept and resumed"
            ) from exc
        raise EnergonPrepareError(
            f"megatron-energon prepare exited with status {exc.code} for {root}"
        ) from exc
    except AssertionError as exc:  # e.g. "Shard X has no samples."
        raise EnergonPrepareError(f"megatron-energon prepare failed for {root}: {exc}") from exc
    if shard_sha256 is None:
        shard_sha256 = {name: _file_sha256(root / name) for name in tar_names}
    seal_index(root, shard_sha256)


def seal_index(root: Path, shard_sha256: Mapping[str, str]) -> str:
    """Rewrite ``.nv-meta/index.sqlite`` canonically and ``index.uuid`` from the content; the new uuid."""
    meta = root / META
    _canonical_sqlite(meta / INDEX_SQLITE)
    h = hashlib.sha256(b"vlmforge energon index.uuid v1\0")
    for name in sorted(shard_sha256):
        h.update(f"shard\0{name}\0{shard_sha256[name]}\0".encode())
    for name in _UUID_INPUTS:
        h.update(f"file\0{name}\0".encode())
        h.update(bytes.fromhex(_file_sha256(meta / name)))  # streamed: the index grows with the samples
    value = str(uuid.UUID(bytes=h.digest()[:16], version=5))  # name-based: the same content, the same uuid
    _replace(meta / INDEX_UUID, lambda tmp: tmp.write_text(value, encoding="utf-8"))
    return value


def _canonical_sqlite(db: Path) -> None:
    """``db`` rebuilt with the same schema and rows, rows in sorted order: identical rows, identical bytes.

    Rows are streamed from the source in sorted order into the rebuild, so memory stays flat however
    many samples the index holds."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as src:
        schema = src.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY rowid"
        ).fetchall()
        pragmas = {p: src.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_size", "user_version")}

        def build(tmp: Path) -> None:
            with contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as dst:
                dst.execute(f"PRAGMA page_size = {int(pragmas['page_size'])}")
                dst.execute(f"PRAGMA user_version = {int(pragmas['user_version'])}")
                dst.execute("BEGIN")
                for kind, name, sql in schema:
                    if kind == "table":
                        dst.execute(sql)
                        ncols = _column_count(src, name)
                        marks = ", ".join("?" * ncols)
                        dst.executemany(
                            f'INSERT INTO "{name}" VALUES ({marks})', _sorted_rows(src, name, ncols)
                        )
                for kind, _, sql in schema:
                    if kind != "table":  # indexes (and any view or trigger) after the rows, as a rebuild does
                        dst.execute(sql)
                dst.execute("COMMIT")

        _replace(db, build)


def _column_count(con: sqlite3.Connection, table: str) -> int:
    return len(con.execute(f'PRAGMA table_info("{table}")').fetchall())


def _sorted_rows(con: sqlite3.Connection, table: str, ncols: int) -> Iterator[tuple[object, ...]]:
    order = ", ".join(str(i) for i in range(1, ncols + 1))
    cursor = con.execute(f'SELECT * FROM "{table}" ORDER BY {order}')
    while rows := cursor.fetchmany(4096):
        yield from rows


def _replace(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` through ``write(tmp)`` into a temporary sibling, fsync it, rename it into place."""
    tmp = path.with_name(f"{TMP_MARK}{path.name}")
    tmp.unlink(missing_ok=True)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        full = no_space(exc, str(path))
        if full is not None:
            raise full from exc
        raise


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _nearly_full(path: Path, margin: int = 1 << 20) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def indexed_counts(root: Path, tar_names: list[str]) -> dict[str, int]:
    """Samples per shard as Energon's ``.info.json`` counts them; it must index exactly ``tar_names``."""
    info = json.loads((root / ".nv-meta" / ".info.json").read_text(encoding="utf-8"))
    shard_counts: dict[str, int] = info.get("shard_counts", {})
    if list(shard_counts) != tar_names:
        raise EnergonPrepareError(f"energon indexed {sorted(shard_counts)}, expected {tar_names}")
    return shard_counts


def indexed_keys(root: Path, tar_names: list[str]) -> dict[str, list[str]]:
    """Sample keys per shard, in sample order, as Energon's ``index.sqlite`` holds them (what a trainer's
    loader finds); shards are numbered in ``tar_names`` order, as prepare numbered them."""
    return dict(iter_indexed_keys(root, tar_names))


def iter_indexed_keys(root: Path, tar_names: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(shard, its keys in sample order) for every name of ``tar_names`` in order, one shard at a time: a
    caller comparing them with what it wrote holds one shard's keys, not the subset's."""
    with contextlib.closing(sqlite3.connect(f"file:{root / META / INDEX_SQLITE}?mode=ro", uri=True)) as con:
        rows = con.execute("SELECT tar_file_id, sample_key FROM samples ORDER BY tar_file_id, sample_index")
        current = 0
        keys: list[str] = []
        for tar_id, key in rows:
            if not 0 <= tar_id < len(tar_names):
                raise EnergonPrepareError(f"index.sqlite names shard {tar_id}; {len(tar_names)} were indexed")
            while current < tar_id:  # the shards before this one are complete (or hold no sample)
                yield tar_names[current], keys
                current, keys = current + 1, []
            keys.append(key)
        while current < len(tar_names):
            yield tar_names[current], keys
            current, keys = current + 1, []
