"""DuckDB over the manifests: one view per table, named after it (``samples``, ``media``, ``subsets``,
``shards``), so a question about a run is one SQL statement; and the result written as CSV or JSON.

Manifests hold list and struct columns (``media.frame_indices``, ...): every output format writes them, as
JSON text in a CSV cell or a table cell, as JSON values in JSON. A failing query is an :class:`OutputError`
of one line (DuckDB's own words, without its multi-line context).

The connection reads the manifests and nothing else unless the caller asks for DuckDB's full access
(``vlmforge query --allow-external-access``): ``query`` may run inside a deployment, on SQL someone typed.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv

from ...schemas.tables import TABLES
from ..errors import ConfigError, OutputError
from ..manifests import OutputLayout
from ..storage import is_local

#: DuckDB settings of a read-only query: no file, network or extension access from SQL. The manifests are
#: handed to DuckDB as Arrow datasets that vlmforge opens itself, so DuckDB needs no path at all (an
#: ``allowed_paths`` list would also let ``COPY ... TO`` overwrite a listed manifest part).
READ_ONLY_CONFIG: dict[str, str | bool] = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
}
LOCKDOWN = ("SET enable_external_access = false", "SET lock_configuration = true")


def connect(out: str, *, allow_external_access: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per manifest table of ``out``.

    By default the connection can read the manifests and nothing else: no ``read_text``/``read_csv`` of
    other files, no ``COPY ... TO``, no ``ATTACH``, no extension install or load, no URL, and the settings are
    locked so SQL cannot lift it. ``allow_external_access`` gives DuckDB's defaults (a local tool on your own
    machine: read and write any file the user can, load extensions)."""
    layout = OutputLayout(out)
    if not layout.fs.isdir(layout.manifests):
        raise OutputError(f"{out!r} has no manifests/ folder: run `vlmforge run RELEASE --out {out}` first")
    if allow_external_access:
        return _connect_open(layout)
    con = duckdb.connect(config=dict(READ_ONLY_CONFIG))
    for name, schema in TABLES.items():
        parts = [p for s in layout.subsets_with(name) for p in layout.parts(name, s)]
        con.register(f"_{name}_parts", _dataset(layout, parts, schema))
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _{name}_parts")
    for statement in LOCKDOWN:
        con.execute(statement)
    return con


def _dataset(layout: OutputLayout, parts: list[str], schema: pa.Schema) -> Any:
    """The parts as one Arrow dataset, columns united by name (as ``union_by_name``: a part written before a
    column existed reads it as null); no parts: an empty table with the table's columns."""
    if not parts:
        return schema.empty_table()
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs = None if is_local(layout.fs) else PyFileSystem(FSSpecHandler(layout.fs))
    united = pa.unify_schemas([pq.read_schema(p, filesystem=fs) for p in parts], promote_options="permissive")
    return ds.dataset(parts, schema=united, format="parquet", filesystem=fs)


def _connect_open(layout: OutputLayout) -> duckdb.DuckDBPyConnection:
    """DuckDB with its default access, the views reading the part files directly."""
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


def run_query(out: str, sql: str, *, allow_external_access: bool = False) -> pa.Table:
    """Run ``sql`` over the manifests of ``out`` (read-only unless ``allow_external_access``: see
    :func:`connect`); a failure is one line in DuckDB's own words."""
    con = connect(out, allow_external_access=allow_external_access)
    try:
        table: pa.Table = con.sql(sql).to_arrow_table()
        return table
    except (duckdb.Error, pa.ArrowException) as exc:
        raise OutputError(f"query failed: {one_line(exc)}") from exc
    finally:
        con.close()


def one_line(exc: BaseException) -> str:
    """An error in one line: DuckDB's message and its hints ("Candidate bindings: ...", "Did you mean
    ...?"), without the query it echoes and the caret under it (``LINE 1: ...`` / ``^``)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith("LINE ") and set(line) != {"^"}]
    return "; ".join(kept) if kept else type(exc).__name__


# --------------------------------------------------------------------------------------------------------
# Output formats


def _binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t))


def _nested(t: pa.DataType) -> bool:
    """A column CSV cannot hold as it is (lists, structs, maps, unions; binary, written as hex)."""
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_struct(t)
        or pa.types.is_map(t)
        or pa.types.is_union(t)
        or _binary(t)
    )


def _hex(value: bytes) -> str:
    return value.hex()


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value


def to_json_text(value: Any) -> str:
    """One cell as JSON text (lists, structs and maps as JSON; bytes as hex; other values by ``str``)."""
    return json.dumps(_json_value(value), default=str, ensure_ascii=False)


def flat_columns(table: pa.Table) -> pa.Table:
    """``table`` with every list, struct or map column as JSON text, binary as hex (nulls stay null)."""
    columns = []
    for col in table.columns:
        if _nested(col.type):
            text = _hex if _binary(col.type) else to_json_text
            col = pa.array([None if v is None else text(v) for v in col.to_pylist()], pa.string())
        columns.append(col)
    return pa.table(columns, names=table.column_names)


def _csv(table: pa.Table) -> str:
    buf = io.BytesIO()
    pacsv.write_csv(flat_columns(table), buf)
    return buf.getvalue().decode("utf-8")


def _json(table: pa.Table) -> str:
    return json.dumps(_json_value(table.to_pylist()), default=str, ensure_ascii=False)


def text_rows(table: pa.Table) -> list[list[str]]:
    """The rows as display strings (nested values as JSON, null as an empty cell), for a terminal table."""
    return [["" if v is None else str(v) for v in row.values()] for row in flat_columns(table).to_pylist()]


#: ``vlmforge query --format``: the text of a result table in each file format (``table`` is the terminal's).
FORMATS: dict[str, Callable[[pa.Table], str]] = {"csv": _csv, "json": _json}
FORMAT_NAMES = ("table", *FORMATS)


def render(table: pa.Table, fmt: str) -> str:
    """The result table as text in the file format ``fmt``; ConfigError for a format there is none of."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMAT_NAMES)}")
    try:
        return FORMATS[fmt](table)
    except pa.ArrowException as exc:
        raise OutputError(f"query result cannot be written as {fmt}: {one_line(exc)}") from exc
