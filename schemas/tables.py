"""Manifest tables: the pipeline's system of record (Parquet, hive-partitioned by ``subset=``).

MANIFEST BREAKING CHANGE rule: renaming or retyping a column here breaks users' DuckDB queries and later
runs' resume; add columns, never repurpose them. Column meanings are documented in README.md.
"""

from __future__ import annotations

from typing import Final, Literal

import pyarrow as pa

from .estimate_rows import ESTIMATES
from .rows import MediaRow, SampleRow, arrow_schema

SampleStatus = Literal["ok", "rejected", "dropped"]
SAMPLE_STATUSES: Final = ("ok", "rejected", "dropped")
MEDIA_KINDS: Final = ("image", "video")

# One row per input line of a subset's JSONL / per media reference: the columns are the fields of the typed
# rows (schemas/rows.py), where they are documented.
SAMPLES: Final = arrow_schema(SampleRow)
MEDIA: Final = arrow_schema(MediaRow)

SUBSETS = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("readme_sha256", pa.string()),
        pa.field("jsonl_sha256", pa.string()),
        pa.field("jsonl_bytes", pa.int64()),
        pa.field("license", pa.string()),
        pa.field("license_text", pa.string()),  # the README's own words when no SPDX id was recognised
        pa.field("media_tars", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("ok", pa.int64()),
        pa.field("rejected", pa.int64()),
        pa.field("dropped", pa.int64()),
        pa.field("text_tokens", pa.int64()),
        pa.field("visual_tokens", pa.int64()),
        pa.field("published", pa.bool_()),  # passed the gate and its Energon dataset was written
        pa.field("gate", pa.string()),  # passed | failed: <expectations> | skipped
        pa.field("revision", pa.string()),
        pa.field("run_id", pa.string()),
        # Added columns: the catalog's view of the upstream (compared by `vlmforge refresh`).
        pa.field("release", pa.string()),  # the release as given (storage options never stored)
        pa.field("media_sources", pa.list_(pa.string())),  # upstream media sources named by the README
        pa.field("media_recipe_sha256", pa.string()),  # fingerprint of the subset's media recipe
        pa.field("duplicate_rows", pa.int64()),  # rows identical to an earlier row (duplicate_row rejects)
        pa.field("id_conflicts", pa.int64()),  # rows reusing an earlier row's id with other content
        pa.field("previous_license", pa.string()),  # the license before the last change (null: never changed)
        pa.field("license_changed_at", pa.string()),  # UTC ISO time of the run that saw the change
        pa.field("license_changed_run", pa.string()),  # run id that saw the change
        pa.field("skip_gate", pa.bool_()),  # published with --skip-gate (debugging)
        # lines a trial run (--limit N) left out: rows = ok + rejected + dropped + beyond_limit; above 0, the
        # published subset is partial
        pa.field("beyond_limit", pa.int64()),
    ]
)

# Fields of the media manifest filled by the fetch stage.
MEDIA_FETCH_FIELDS: Final = tuple(MEDIA.field(n) for n in ("upstream", "fetch_status", "fetch_detail"))
# Fields of the subsets manifest filled by the catalog.
CATALOG_FIELDS: Final = tuple(
    SUBSETS.field(n)
    for n in (
        "release",
        "media_sources",
        "media_recipe_sha256",
        "duplicate_rows",
        "id_conflicts",
        "previous_license",
        "license_changed_at",
        "license_changed_run",
    )
)

SHARDS = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("shard", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
    ]
)

# One row per planned sample (ok, fits seq_len). MANIFEST BREAKING CHANGE rule applies .
PLAN = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),
        pa.field("sample_id", pa.string()),
        pa.field("line", pa.int64(), nullable=False),  # 1-based line in <subset>.jsonl (joins samples)
        pa.field("key", pa.string()),  # Energon sample key
        pa.field("split", pa.string()),  # train | val
        pa.field("tokens", pa.int64(), nullable=False),  # total_tokens of the sample
        pa.field("padded_tokens", pa.int64(), nullable=False),  # tokens rounded up to pad_multiple
        pa.field("pack", pa.int64(), nullable=False),  # pack id, unique across the whole plan
        pa.field("pack_index", pa.int32(), nullable=False),  # position of the sample in its pack
        pa.field("pack_offset", pa.int64(), nullable=False),  # first token of the sample in its pack (padded)
        pa.field("scope", pa.string(), nullable=False),  # subset | mix
        pa.field("seq_len", pa.int64(), nullable=False),
        # Added columns: encoder balance (``vlmforge plan --balance visual``; null without it).
        pa.field("visual_tokens", pa.int64()),  # visual tokens of the sample
        pa.field("step", pa.int64()),  # training step of the pack (packs step*dp .. step*dp+dp-1)
        pa.field("rank", pa.int32()),  # data-parallel rank that gets the pack at that step
    ]
)

# One row per stage of a run (and per subset where a stage works per subset): wall time and throughput.
# Partitioned like the other tables; run-wide stages use subset ``_run``. MANIFEST BREAKING CHANGE rule.
RUNS = pa.schema(
    [
        pa.field("subset", pa.string(), nullable=False),  # a subset, or _run for run-wide stages
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("stage", pa.string(), nullable=False),  # staging | catalog | batches | parse | media | ...
        pa.field("started_at", pa.string()),  # UTC ISO time the run started
        pa.field("seconds", pa.float64(), nullable=False),  # wall time (summed over batches per subset)
        pa.field("items", pa.int64()),  # rows, media references, samples... (see unit)
        pa.field("unit", pa.string()),
        pa.field("bytes", pa.int64()),  # bytes read or written by the stage, when known
        pa.field("items_per_s", pa.float64()),
        pa.field("mb_per_s", pa.float64()),
        pa.field("batches", pa.int64()),  # batches run (batches / sub-stages)
        pa.field("skipped", pa.int64()),  # batches (or staged subsets) that were current and skipped
        pa.field("source_format", pa.string()),
    ]
)

TABLES: Final[dict[str, pa.Schema]] = {
    "samples": SAMPLES,
    "media": MEDIA,
    "subsets": SUBSETS,
    "shards": SHARDS,
    "plan": PLAN,
    "runs": RUNS,
    "estimates": ESTIMATES,  # `vlmforge catalog --estimate` (schemas/estimate_rows.py)
}


def empty_row(schema: pa.Schema) -> dict[str, object]:
    """A row dict with every column of ``schema`` set to None (callers fill what they know)."""
    return {name: None for name in schema.names}
