"""Profiles: what DuckDB aggregates from every row of a subset's manifests, for the suites to bound.

Great Expectations' pandas engine needs minutes for millions of rows (it hashes the whole frame, filters it
once per metric and checks some types value by value), so the gate does not hand it the manifest. DuckDB
scans every row once and aggregates it into the subset's *profile*, a handful of rows (one per status value
for ``samples``; per kind, status and owning sample's status for ``media``; per shard for ``shards``) whose
columns are the facts the expectations bound: counts of violating rows, minima, maxima, shares. The
``media`` profile keeps the owning sample's status, so bounds on what is published judge only the media of
ok samples. A
row-level violation anywhere shows up in the profile, so a suite passes exactly when the row-level check
would. A new bound is a new profile column here and an expectation in the suite's JSON.

DuckDB and pandas are imported when a profile is computed, not when the module is: the CLI reads results
without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from ...schemas.tables import TABLES
from ..manifests import OutputLayout
from ..storage import is_local

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    from fsspec import AbstractFileSystem


@dataclass(frozen=True)
class ManifestParts:
    """Parquet parts of one manifest table of one subset (read by DuckDB in place, projected)."""

    paths: tuple[str, ...]
    fs: AbstractFileSystem
    schema: pa.Schema

    @classmethod
    def of(cls, layout: OutputLayout, table: str, subset: str) -> ManifestParts:
        return cls(tuple(layout.parts(table, subset)), layout.fs, TABLES[table])


Source: TypeAlias = pa.Table | ManifestParts


@contextmanager
def open_views(sources: Mapping[str, Source]) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB with one view per source (Arrow tables zero-copy, Parquet parts in place)."""
    import duckdb

    con = duckdb.connect()
    try:
        for name, source in sources.items():
            _add_view(con, name, source)
        yield con
    finally:
        con.close()


def _add_view(con: duckdb.DuckDBPyConnection, name: str, source: Source) -> None:
    if isinstance(source, pa.Table):
        con.register(name, source)
    elif not source.paths:
        con.register(name, source.schema.empty_table())
    else:
        prefix = ""
        if not is_local(source.fs):
            protocol = source.fs.protocol
            prefix = (protocol if isinstance(protocol, str) else protocol[0]) + "://"
            if not con.filesystem_is_registered(protocol if isinstance(protocol, str) else protocol[0]):
                con.register_filesystem(source.fs)  # once a connection: a second one of a name is refused
        files = ", ".join("'" + (prefix + p).replace("'", "''") + "'" for p in source.paths)
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{files}], "
            "hive_partitioning = false, union_by_name = true)"
        )


def sql_params(sql: str) -> set[str]:
    """The ``$name`` parameters a query uses."""
    return set(re.findall(r"\$([A-Za-z_]\w*)", sql))


def query_frame(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """The result of ``sql`` as a pandas frame; the query's ``$name`` parameters come from ``params``."""
    frame: pd.DataFrame = con.execute(sql, {n: (params or {}).get(n) for n in sql_params(sql)}).df()
    return frame


# --------------------------------------------------------------------------------------------------------
# samples and media

SAMPLES_PROFILE = """
WITH dup_lines AS (
    SELECT line FROM samples WHERE line IS NOT NULL GROUP BY line HAVING count(*) > 1
), dup_ids AS (  -- the parser's rule: a recorded id conflict (id_conflict_of) keeps its own key
    SELECT status, sample_id FROM samples WHERE sample_id IS NOT NULL AND id_conflict_of IS NULL
    GROUP BY ALL HAVING count(*) > 1
), dup_keys AS (
    SELECT status, key FROM samples WHERE key IS NOT NULL GROUP BY ALL HAVING count(*) > 1
), ids AS (
    SELECT s.status, count(*) AS n FROM samples s
    SEMI JOIN dup_ids d ON d.status IS NOT DISTINCT FROM s.status AND d.sample_id = s.sample_id
    WHERE s.id_conflict_of IS NULL
    GROUP BY s.status
), keys AS (
    SELECT s.status, count(*) AS n FROM samples s
    SEMI JOIN dup_keys d ON d.status IS NOT DISTINCT FROM s.status AND d.key = s.key
    GROUP BY s.status
), base AS (
    SELECT status,
        count(*) AS rows,
        count(*) FILTER (line IS NULL) AS null_lines,
        count(*) FILTER (line IN (SELECT line FROM dup_lines)) AS duplicate_lines,
        count(*) FILTER (sample_id IS NULL) AS null_sample_ids,
        count(*) FILTER (key IS NULL) AS null_keys,
        count(*) FILTER (reason IS NULL) AS null_reasons,
        count(*) FILTER (total_tokens IS NULL OR text_tokens IS NULL OR visual_tokens IS NULL
                         OR total_tokens < 1 OR text_tokens < 1 OR visual_tokens < 0)
            AS nonpositive_token_counts,
        count(*) FILTER (text_tokens + visual_tokens IS DISTINCT FROM total_tokens) AS token_sum_mismatches,
        min(total_tokens) AS min_total_tokens,
        max(total_tokens) AS max_total_tokens,
        coalesce(sum(total_tokens), 0) AS token_sum,
        max(n_images) AS max_images
    FROM samples GROUP BY status
)
SELECT base.status, base.rows,
    base.rows / sum(base.rows) OVER () AS share,
    base.null_lines, base.duplicate_lines, base.null_sample_ids,
    coalesce(ids.n, 0) AS duplicate_sample_ids,
    base.null_keys,
    coalesce(keys.n, 0) AS duplicate_keys,
    base.null_reasons, base.nonpositive_token_counts, base.token_sum_mismatches,
    base.min_total_tokens, base.max_total_tokens, base.token_sum, base.max_images
FROM base
LEFT JOIN ids ON ids.status IS NOT DISTINCT FROM base.status
LEFT JOIN keys ON keys.status IS NOT DISTINCT FROM base.status
ORDER BY base.status NULLS LAST
"""

# Stored objects that rows describe differently (usually none: then the profile does not look them up).
MEDIA_CONFLICTS = """
SELECT out_sha256 FROM media WHERE status = 'ok' AND out_sha256 IS NOT NULL GROUP BY out_sha256
HAVING min(out_bytes) <> max(out_bytes) OR min(out_ext) <> max(out_ext)
    OR min(out_width) <> max(out_width) OR min(out_height) <> max(out_height)
"""

MEDIA_PROFILE = """
WITH owner AS (
    SELECT line, any_value(status) AS status FROM samples WHERE line IS NOT NULL GROUP BY line
), checked AS (  -- a kept original is stored under its upstream sha256: match that string once
    SELECT *, CASE WHEN out_sha256 = sha256 THEN sha_ok
                   ELSE coalesce(regexp_full_match(out_sha256, '[0-9a-f]{64}'), false) END AS out_sha_ok
    FROM (SELECT *, coalesce(regexp_full_match(sha256, '[0-9a-f]{64}'), false) AS sha_ok FROM media)
)
SELECT m.kind, m.status, owner.status AS sample_status,
    count(*) AS refs,
    count(*) FILTER (NOT m.sha_ok) AS bad_sha256,
    count(*) FILTER (NOT m.out_sha_ok) AS bad_out_sha256,
    {object_conflicts} AS object_conflicts,
    min(coalesce(CAST(m.out_width AS BIGINT) * m.out_height, 0)) AS min_out_pixels,
    max(CAST(m.out_width AS BIGINT) * m.out_height) AS max_out_pixels,
    min(coalesce(m.visual_tokens, 0)) * CAST($factor_squared AS BIGINT) AS min_resized_pixels,
    max(m.visual_tokens) * CAST($factor_squared AS BIGINT) AS max_resized_pixels,
    min(coalesce(m.out_bytes, 0)) AS min_out_bytes,
    max(m.out_bytes) AS max_out_bytes,
    count(*) FILTER (m.reason IS NULL) AS null_reasons
FROM checked m LEFT JOIN owner ON owner.line = m.line
GROUP BY ALL
ORDER BY ALL NULLS LAST
"""


def samples_profile(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The ``samples`` profile of the subset whose manifest is the view ``samples`` of ``con``."""
    return query_frame(con, SAMPLES_PROFILE)


def media_profile(con: duckdb.DuckDBPyConnection, factor_squared: int | None) -> pd.DataFrame:
    """The ``media`` profile (views ``media`` and ``samples``); resized pixels only with a factor."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE media_conflicts AS {MEDIA_CONFLICTS}")
    found = con.execute("SELECT count(*) FROM media_conflicts").fetchall()[0][0]
    conflicts = "count(*) FILTER (m.out_sha256 IN (SELECT out_sha256 FROM media_conflicts))" if found else "0"
    return query_frame(
        con, MEDIA_PROFILE.replace("{object_conflicts}", conflicts), {"factor_squared": factor_squared}
    )


# --------------------------------------------------------------------------------------------------------
# shards

OK_SAMPLES = "SELECT line, sample_id, key, split, shard FROM samples WHERE status = 'ok'"

# One row per listed shard: what the listing, energon's index, the file and the shards manifest say.
SHARD_META = pa.schema(
    [
        ("shard", pa.string()),
        ("split", pa.string()),
        ("listed_samples", pa.int64()),
        ("indexed_samples", pa.int64()),
        ("listed_bytes", pa.int64()),
        ("file_bytes", pa.int64()),
        ("manifest_samples", pa.int64()),
    ]
)
# One row per listed key.
SHARDS_PROFILE = """
WITH ok_keys AS (
    SELECT key, any_value(split) AS split FROM ok_samples WHERE key IS NOT NULL GROUP BY key
), repeated AS (
    SELECT key FROM listing GROUP BY key HAVING count(*) > 1
), per_shard AS (
    SELECT l.shard,
        count(*) AS keys,
        count(*) FILTER (l.key IN (SELECT key FROM repeated)) AS repeated_keys,
        count(*) FILTER (o.key IS NULL) AS unexpected_keys,
        count(*) FILTER (o.key IS NOT NULL AND o.split IS DISTINCT FROM l.split) AS split_mismatches
    FROM listing l LEFT JOIN ok_keys o ON o.key = l.key
    GROUP BY l.shard
), filled AS (
    SELECT shard, count(*) AS n FROM ok_samples WHERE shard IS NOT NULL GROUP BY shard
)
SELECT m.shard, m.split, m.listed_samples,
    coalesce(p.keys, 0) AS keys,
    m.indexed_samples, m.listed_bytes, m.file_bytes, m.manifest_samples,
    CASE WHEN $published THEN coalesce(f.n, 0) END AS filled_samples,
    coalesce(p.repeated_keys, 0) AS repeated_keys,
    coalesce(p.unexpected_keys, 0) AS unexpected_keys,
    coalesce(p.split_mismatches, 0) AS split_mismatches
FROM shard_meta m
LEFT JOIN per_shard p ON p.shard = m.shard
LEFT JOIN filled f ON f.shard = m.shard
ORDER BY m.shard
"""


def add_shard_views(
    con: duckdb.DuckDBPyConnection, meta_rows: list[dict[str, Any]], listing: pa.Table
) -> int:
    """Views ``shard_meta``, ``listing`` and ``ok_samples`` next to ``samples``; the number of ok samples."""
    con.register("shard_meta", pa.Table.from_pylist(meta_rows, schema=SHARD_META))
    con.register("listing", listing)  # publish.listing.listing_table
    con.execute(f"CREATE VIEW ok_samples AS {OK_SAMPLES}")
    return int(con.execute("SELECT count(*) FROM ok_samples").fetchall()[0][0])


def shards_profile(con: duckdb.DuckDBPyConnection, *, published: bool) -> pd.DataFrame:
    """The ``shards`` profile (views of :func:`add_shard_views`); one row per listed shard."""
    frame = query_frame(con, SHARDS_PROFILE, {"published": published})
    for col in ("listed_samples", "indexed_samples", "listed_bytes", "file_bytes"):
        frame[col] = frame[col].astype("float64")  # nulls compare unequal instead of raising
    return frame
