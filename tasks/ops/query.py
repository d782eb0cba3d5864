"""DuckDB over the manifests: one view per table, named after it (``samples``, ``media``, ``subsets``,
``shards``), so a question about a run is one SQL statement."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ...schemas.manifests import TABLES
from ..errors import OutputError
from ..manifests import OutputLayout
from ..storage import is_local


def connect(out: str) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per manifest table of ``out``."""
    layout = OutputLayout(out)
    if not layout.fs.isdir(layout.manifests):
        raise OutputError(f"{out!r} has no manifests/ folder: run `vlmforge run RELEASE --out {out}` first")
    con = duckdb.connect()
    if not is_local(layout.fs):
        con.register_filesystem(layout.fs)  # s3:// etc. through fsspec: no DuckDB extension download
    prefix = "" if is_local(layout.fs) else f"{layout.fs.protocol[0]}://"
    for name, schema in TABLES.items():
        if any(layout.parts(name, s) for s in layout.subsets_with(name)):
            # part-* only: temporary files of an interrupted write never match.
            pattern = f"{prefix}{layout.manifests}/{name}/subset=*/part-*.parquet"
            con.execute(
                f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{pattern}', "
                "hive_partitioning = false, union_by_name = true)"
            )
        else:  # an empty view with the table's columns, so queries still bind
            con.register(f"_{name}_empty", schema.empty_table())
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}_empty")
    return con


def run_query(out: str, sql: str) -> pa.Table:
    """Run ``sql`` over the manifests of ``out``; DuckDB's own error text reaches the user unchanged."""
    con = connect(out)
    try:
        table: pa.Table = con.sql(sql).to_arrow_table()
        return table
    except duckdb.Error as exc:
        raise OutputError(f"query failed: {exc}") from exc
    finally:
        con.close()
