"""The ``plan`` manifest table: written per subset (``OUT/manifests/plan/subset=<name>/part-00000.parquet``,
schema :data:`~vlmforge.schemas.tables.PLAN`, the plan's options in the file's metadata), read back in
pack order."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ....schemas.tables import PLAN
from ...manifests import OutputLayout, write_parquet

__all__ = ["pack_order", "read_plan", "write_plan"]

_META_KEY = b"vlmforge.plan"


def write_plan(out: str, table: pa.Table, seq_len: int, pad_multiple: int, scope: str) -> list[str]:
    """One part per subset of ``table``, in pack order, atomically; parts of subsets left out are removed."""
    layout = OutputLayout(out)
    meta = f'{{"seq_len": {seq_len}, "pad_multiple": {pad_multiple}, "scope": "{scope}"}}'.encode()
    paths: list[str] = []
    subsets = sorted(set(table.column("subset").to_pylist()))
    for subset in subsets:
        part = table.filter(pc.equal(table["subset"], subset))
        part = part.sort_by([("pack", "ascending"), ("pack_index", "ascending")])
        path = layout.part("plan", subset, 0)
        paths.append(write_parquet(layout.fs, path, part.replace_schema_metadata({_META_KEY: meta})))
    for stale in set(layout.subsets_with("plan")) - set(subsets):
        for p in layout.parts("plan", stale):
            layout.fs.rm(p)
    return paths


def read_plan(out: str, subset: str) -> pa.Table:
    """The plan rows of ``subset`` in pack order (an empty table with :data:`PLAN` when there is none)."""
    layout = OutputLayout(out)
    parts = layout.parts("plan", subset)
    if not parts:
        return PLAN.empty_table()
    tables = []
    for p in parts:
        with layout.fs.open(p, "rb") as f:
            tables.append(pq.read_table(f, schema=PLAN).replace_schema_metadata(None))
    return pa.concat_tables(tables).sort_by([("pack", "ascending"), ("pack_index", "ascending")])


def pack_order(out: str, subset: str) -> dict[int, tuple[int, int]]:
    """``line -> (pack, pack_index)`` of the planned samples of ``subset``: the sort key that writes shards
    in pack order (samples left out of the plan have no entry: put them last, in line order)."""
    plan = read_plan(out, subset)
    return {
        line: (p, i)
        for line, p, i in zip(
            plan.column("line").to_pylist(),
            plan.column("pack").to_pylist(),
            plan.column("pack_index").to_pylist(),
            strict=True,
        )
    }
