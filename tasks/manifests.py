"""Reading and writing the manifest tables (Parquet parts, hive-partitioned by ``subset=``).

A part is written to a temporary name and renamed into place; its Parquet key-value metadata carries the
fingerprint of the inputs and options that made it, so a rerun skips exactly the parts that are current.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..schemas.rows import MediaRow, SampleRow
from ..schemas.tables import TABLES
from .storage import atomic_write_bytes, is_local, url_to_fs

FINGERPRINT_KEY = b"vlmforge.fingerprint"
STATS_KEY = b"vlmforge.stats"


class OutputLayout:
    """Where everything lives under OUT (see README: Output folder)."""

    def __init__(self, out: str) -> None:
        self.out = out.rstrip("/")
        self.fs, self.root = url_to_fs(self.out)
        if not is_local(self.fs):
            # No listings cache: several workers and nodes write one output, and a process's cached
            # listing (or an object's ETag in it) goes stale when another rewrites a part (s3fs then
            # fails the read with FileExpired, or a listing misses the parts written since).
            self.fs, self.root = url_to_fs(self.out, use_listings_cache=False)

    @property
    def manifests(self) -> str:
        return f"{self.root}/manifests"

    @property
    def store(self) -> str:
        return f"{self.out}/store"

    @property
    def energon(self) -> str:
        return f"{self.root}/energon"

    @property
    def quality(self) -> str:
        return f"{self.root}/quality"

    def table_dir(self, table: str, subset: str) -> str:
        return f"{self.manifests}/{table}/subset={subset}"

    def part(self, table: str, subset: str, index: int = 0) -> str:
        return f"{self.table_dir(table, subset)}/part-{index:05d}.parquet"

    def parts(self, table: str, subset: str) -> list[str]:
        folder = self.table_dir(table, subset)
        if not self.fs.isdir(folder):
            return []
        return sorted(
            p
            for p in self.fs.ls(folder, detail=False)
            if p.rsplit("/", 1)[-1].startswith("part-") and p.endswith(".parquet")
        )

    def subsets_with(self, table: str) -> list[str]:
        folder = f"{self.manifests}/{table}"
        if not self.fs.isdir(folder):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]
        return sorted(n.split("=", 1)[1] for n in names if n.startswith("subset="))


Row = Mapping[str, Any] | SampleRow | MediaRow


def _columns(row: Row, names: list[str], known: frozenset[str]) -> dict[str, Any]:
    """A row's values by column: a typed row's fields, or a mapping's keys (a missing one is null, an
    unknown one an error: a misspelt key must not vanish from the manifest)."""
    if not isinstance(row, Mapping):
        return {name: getattr(row, name) for name in names}
    unknown = row.keys() - known
    if unknown:
        raise ValueError(f"unknown manifest column(s) {sorted(unknown)}; the table has {names}")
    return {name: row.get(name) for name in names}


def to_table(rows: Iterable[Row], schema: pa.Schema) -> pa.Table:
    names = schema.names
    rows = list(rows)
    if not any(isinstance(r, Mapping) for r in rows):  # typed rows: column by column, no dict per row
        return pa.Table.from_pydict({n: [getattr(r, n) for r in rows] for n in names}, schema=schema)
    known = frozenset(names)
    return pa.Table.from_pylist([_columns(r, names, known) for r in rows], schema=schema)


def write_parquet(fs: Any, path: str, tbl: pa.Table) -> str:
    """Atomically write ``tbl`` as one zstd Parquet file at ``path``; returns the path. Every manifest
    part, the subsets, runs, plan and estimates tables are written through it."""
    buf = io.BytesIO()
    pq.write_table(tbl, buf, compression="zstd")
    atomic_write_bytes(fs, path, buf.getvalue())
    return path


def write_part(
    layout: OutputLayout,
    table: str,
    subset: str,
    index: int,
    rows: Iterable[Row],
    *,
    fingerprint: str | None = None,
    stats: Mapping[str, Any] | None = None,
) -> str:
    """Atomically write one part of ``table``; returns its path."""
    schema = TABLES.get(table)
    if schema is None:
        raise KeyError(f"unknown manifest table {table!r}")
    return write_part_table(
        layout, table, subset, index, to_table(rows, schema), fingerprint=fingerprint, stats=stats
    )


def write_part_table(
    layout: OutputLayout,
    table: str,
    subset: str,
    index: int,
    tbl: pa.Table,
    *,
    fingerprint: str | None = None,
    stats: Mapping[str, Any] | None = None,
) -> str:
    """Atomically write one part of ``table`` from an Arrow table of its schema; returns its path."""
    meta: dict[bytes, bytes] = {}
    if fingerprint is not None:
        meta[FINGERPRINT_KEY] = fingerprint.encode()
    if stats is not None:
        meta[STATS_KEY] = json.dumps(dict(stats), sort_keys=True).encode()
    tbl = tbl.replace_schema_metadata(meta or None)
    return write_parquet(layout.fs, layout.part(table, subset, index), tbl)


def write_records_part(
    layout: OutputLayout, subset: str, index: int, records: list[tuple[int, str]], fingerprint: str
) -> str:
    """Normalised records (line, JSON) of a batch's ok samples: what the shard writer packs."""
    tbl = pa.table(
        {"line": pa.array([r[0] for r in records], pa.int64()), "record": pa.array([r[1] for r in records])}
    ).replace_schema_metadata({FINGERPRINT_KEY: fingerprint.encode()})
    return write_parquet(
        layout.fs, f"{layout.manifests}/records/subset={subset}/part-{index:05d}.parquet", tbl
    )


def part_metadata(layout: OutputLayout, path: str) -> dict[bytes, bytes] | None:
    """Key-value metadata of a part, or None when it does not exist or cannot be read."""
    try:
        with layout.fs.open(path, "rb") as f:
            meta = pq.read_metadata(f).metadata
        return dict(meta or {})
    except (FileNotFoundError, OSError, pa.ArrowInvalid):
        return None


def read_table(
    layout: OutputLayout,
    table: str,
    subset: str,
    columns: Sequence[str] | None = None,
    where: pc.Expression | None = None,
) -> pa.Table:
    """All parts of ``table`` for ``subset`` in part order (an empty table with the schema if none);
    ``columns``: only these (Parquet reads no other column's pages); ``where``: only the rows it keeps,
    filtered part by part (the whole table is never held)."""
    schema = TABLES[table]
    if columns is not None:
        schema = pa.schema([schema.field(name) for name in columns])
    tables = []
    for p in layout.parts(table, subset):
        with layout.fs.open(p, "rb") as f:
            part = pq.read_table(f, schema=schema, columns=None if columns is None else list(columns))
            tables.append(part.replace_schema_metadata(None) if where is None else part.filter(where))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def read_records(layout: OutputLayout, subset: str) -> Iterable[tuple[int, str]]:
    folder = f"{layout.manifests}/records/subset={subset}"
    if not layout.fs.isdir(folder):
        return
    for p in sorted(layout.fs.ls(folder, detail=False)):
        if not p.endswith(".parquet") or not p.rsplit("/", 1)[-1].startswith("part-"):
            continue
        yield from read_records_part(layout, p)


def read_records_part(layout: OutputLayout, path: str) -> list[tuple[int, str]]:
    """(line, record JSON) of one records part (none when it does not exist)."""
    try:
        with layout.fs.open(path, "rb") as f:
            tbl = pq.read_table(f)
    except FileNotFoundError:
        return []
    return list(zip(tbl.column("line").to_pylist(), tbl.column("record").to_pylist(), strict=True))


def remove_parts_from(layout: OutputLayout, subset: str, first_stale: int) -> None:
    """Delete batch parts numbered ``first_stale`` and up (left from a longer earlier JSONL)."""
    for table in ("samples", "media", "records"):
        folder = f"{layout.manifests}/{table}/subset={subset}"
        if not layout.fs.isdir(folder):
            continue
        for p in layout.fs.ls(folder, detail=False):
            name = p.rsplit("/", 1)[-1]
            if name.startswith("part-") and name.endswith(".parquet") and int(name[5:10]) >= first_stale:
                layout.fs.rm(p)
