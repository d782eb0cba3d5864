"""Megatron-energon's ``.nv-meta`` for shards the writer made: ``index.sqlite``, ``.info.json``,
``split.yaml``, ``index.uuid``.

Energon's prepare learns each shard's samples by reading every member header back with :mod:`tarfile`
(0.25 s of CPU per 10,000-sample text shard even with a reader of our own) and inserts a Python object per
row through its own writer; a 200,000-row subset spent 8-10 s there, a third of its publish. The writer
knows every member's offset as it writes it, so the index is built from that (:mod:`.shard_index`), one
shard at a time as shards finish, into Energon's own schema: :class:`IndexDb` takes the ``CREATE``
statements from Energon's ``SqliteIndexWriter`` itself, and the info and split files are made with
Energon's own types and serialisers, as its prepare makes them. ``tests/publish/test_shard_index.py`` runs
Energon's unmodified prepare over the same shards and finds the same rows, schema and files.

The shard ids are the shards' positions in ``.info.json`` (how Energon's reader resolves them), given in
the order the shards were finished, so rows go to the index as soon as a shard is closed. The same samples
give the same sequence of inserts, so the same bytes; :func:`seal_index` then derives ``index.uuid`` from the
content (every shard's name and sha256, ``.info.json``, ``split.yaml`` and the index), so identical runs
give byte-identical ``.nv-meta`` files and a changed dataset a new uuid (Energon keys its join caches by it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import yaml

from ..storage import TMP_MARK, no_space
from .rolling import Done
from .samples import EnergonPrepareError
from .shard_index import ShardIndex, index_members, write_tar_index
from .tar import TarMember, tar_members

__all__ = [
    "DatasetIndex",
    "IndexDb",
    "indexed_keys",
    "iter_indexed_keys",
    "seal_index",
    "write_info_and_splits",
]

META = ".nv-meta"
INDEX_SQLITE = "index.sqlite"
INDEX_UUID = "index.uuid"
INFO_JSON = ".info.json"
SPLIT_YAML = "split.yaml"
# The files the uuid is derived from, besides the shards.
_UUID_INPUTS = (INFO_JSON, SPLIT_YAML, INDEX_SQLITE)


class IndexDb:
    """``index.sqlite`` of a dataset being written, in Energon's schema, filled one shard at a time.

    Built under a temporary name in one transaction; :meth:`close` adds Energon's indexes after the rows
    (as Energon's writer does), makes the file durable and renames it into place."""

    def __init__(self, meta: Path, fsync: bool = True) -> None:
        meta.mkdir(parents=True, exist_ok=True)
        self.path, self.fsync = meta / INDEX_SQLITE, fsync
        self.tmp = meta / f"{TMP_MARK}{INDEX_SQLITE}"
        self.tmp.unlink(missing_ok=True)
        tables, self._indexes = _energon_schema(meta)
        self.db: sqlite3.Connection | None = sqlite3.connect(self.tmp, isolation_level=None)
        self.db.execute("BEGIN")
        for sql in tables:
            self.db.execute(sql)

    def add(self, shard: ShardIndex) -> None:
        """The shard's rows (its id is its position in ``.info.json``)."""
        assert self.db is not None, "index closed"
        try:
            self.db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)", shard.samples)
        except sqlite3.IntegrityError as exc:  # Energon's schema keeps sample keys unique across shards
            raise EnergonPrepareError(f"shard {shard.tar_id} repeats a sample key of the dataset") from exc
        self.db.executemany("INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)", shard.parts)

    def close(self) -> None:
        assert self.db is not None, "index closed"
        for sql in self._indexes:
            self.db.execute(sql)
        self.db.execute("COMMIT")
        self.db.close()
        self.db = None
        if self.fsync:
            with open(self.tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None
        self.tmp.unlink(missing_ok=True)


class DatasetIndex:
    """The index of a dataset as its shards finish (a :class:`~.rolling.ShardWriter`'s ``on_done``): each
    shard's ``.tar.idx`` and rows, its id the count of shards finished before it; ``done`` in that order."""

    def __init__(self, root: Path, fsync: bool = True) -> None:
        self.root = root
        self.db = IndexDb(root / META, fsync)
        self.done: list[Done] = []

    def add(self, done: Done, members: list[TarMember] | None) -> None:
        path = self.root / done.shard
        if members is None:  # kept from an interrupted attempt: its members read back from the file
            members = list(tar_members(path))
        shard = index_members(len(self.done), members)  # checked against the written keys once all are in
        write_tar_index(path, shard.offsets)
        self.db.add(shard)
        self.done.append(done)


_schema_cache: list[tuple[list[str], list[str]]] = []


def _energon_schema(meta: Path) -> tuple[list[str], list[str]]:
    """(``CREATE TABLE`` statements, the other ``CREATE`` statements) of the index Energon's own writer
    makes, in its order: taken from an empty index it writes once per process (inside the output folder)."""
    if not _schema_cache:
        from megatron.energon.epathlib import EPath  # Energon imports torch: only where it runs
        from megatron.energon.flavors.webdataset.indexing import SqliteIndexWriter

        template = meta / f"{TMP_MARK}schema-{os.getpid()}.sqlite"
        try:
            SqliteIndexWriter(EPath(template)).close()
            with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as con:
                rows = con.execute(
                    "SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
                    "ORDER BY rowid"
                ).fetchall()
        finally:
            template.unlink(missing_ok=True)
        _schema_cache.append(
            ([sql for kind, sql in rows if kind == "table"], [sql for kind, sql in rows if kind != "table"])
        )
    return _schema_cache[0]


def write_info_and_splits(
    root: Path, shard_counts: Mapping[str, int], split_shards: Mapping[str, Sequence[str]]
) -> None:
    """``.info.json`` (the shards in id order with their sample counts) and ``split.yaml`` (each split's
    shards, brace-collapsed) as Energon's prepare writes them, with its permissions: the folder
    user-writable, each file at its first shard's mode, owner read-write added."""
    from megatron.energon import __version__ as energon_version
    from megatron.energon.bracecollapse import collapse
    from megatron.energon.flavors.webdataset.structs import WebdatasetInfo, WebdatasetSplits
    from megatron.energon.typed_converter import to_json_object

    meta = root / META
    info = WebdatasetInfo(energon_version=energon_version, shard_counts=dict(shard_counts))
    splits = WebdatasetSplits(
        split_parts={split: collapse(list(names), keep_order=True) for split, names in split_shards.items()}
    )
    _replace(meta / INFO_JSON, lambda tmp: tmp.write_text(json.dumps(to_json_object(info), indent=2)))
    _replace(
        meta / SPLIT_YAML, lambda tmp: tmp.write_text(yaml.dump(to_json_object(splits), sort_keys=False))
    )
    with contextlib.suppress(OSError, StopIteration):
        meta.chmod(root.stat().st_mode | 0o700)
        mode = (root / next(iter(shard_counts))).stat().st_mode | 0o600
        for name in (INDEX_SQLITE, INFO_JSON, SPLIT_YAML):
            (meta / name).chmod(mode)


def seal_index(root: Path, shard_sha256: Mapping[str, str]) -> str:
    """Write ``.nv-meta/index.uuid`` derived from the content; the uuid."""
    meta = root / META
    h = hashlib.sha256(b"vlmforge energon index.uuid v1\0")
    for name in sorted(shard_sha256):
        h.update(f"shard\0{name}\0{shard_sha256[name]}\0".encode())
    for name in _UUID_INPUTS:
        h.update(f"file\0{name}\0".encode())
        h.update(bytes.fromhex(_file_sha256(meta / name)))  # streamed: the index grows with the samples
    value = str(uuid.UUID(bytes=h.digest()[:16], version=5))  # name-based: the same content, the same uuid
    _replace(meta / INDEX_UUID, lambda tmp: tmp.write_text(value, encoding="utf-8"))
    return value


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
