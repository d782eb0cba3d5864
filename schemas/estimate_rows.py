"""Typed rows of the ``estimates`` manifest: what ``vlmforge catalog --estimate`` expects a run to fetch,
store and take, per subset (and ``_total``), before any media body is read. A field IS a column (see
``rows.py``).

MANIFEST BREAKING CHANGE rule: add fields at the end, never rename or repurpose them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .rows import arrow_schema

__all__ = ["ESTIMATES", "TOTAL", "EstimateRow"]

TOTAL = "_total"  # the subset value of the whole release's row


@dataclass(slots=True, kw_only=True)
class EstimateRow:
    """One subset's estimate (or the release's, ``subset = _total``)."""

    subset: str
    estimate_id: str  # UTC time of the estimate (sortable), one per `catalog --estimate`
    release: str | None = None
    settings: str | None = None  # JSON: the knobs, cores and bandwidth the figures are for
    rows: int = 0  # JSONL lines
    records: int = 0  # lines the parser keeps (what the run works)
    refs: int = 0  # media references of those records
    objects: int = 0  # distinct objects (the store's upstream index key: URL, archive#member, file)
    new_objects: int = 0  # objects no earlier subset of this estimate references (cross-subset de-dup)
    in_store: int = 0  # objects the store's upstream index holds already (a rerun fetches none of them)
    missing: int = 0  # references no recipe source answers (known without a body: listings, indexes, HEAD)
    sources: str | None = None  # source kinds that answer, with their object counts
    bytes: int = 0  # the objects' bytes (point estimate)
    bytes_low: int = 0  # 95% interval where sizes were sampled (equal to bytes when exact)
    bytes_high: int = 0
    bytes_method: str = "exact"  # exact | sampled | bound (a tar streamed whole: its size is the bound)
    probed: int = 0  # objects whose size was asked over HTTP/S3/HF (HEAD, ranged GET, listing)
    fetch_bytes: int = 0  # network transfer still to do (objects not in the store; archives' overheads)
    store_bytes: int = 0  # disk the content store gains
    shard_bytes: int = 0  # disk of the published shards
    disk_method: str = "default"  # previous_run | sample | default: where the out/in ratios come from
    cpu_hours: float = 0.0
    network_hours: float = 0.0
    disk_hours: float = 0.0
    hours: float = 0.0  # the longest of the three (the stages overlap); the total adds fixed_hours
    bottleneck: str = "cpu"  # network | cpu | disk
    rates: str | None = None  # runs_table (run id) | default
    sample_bodies: int = 0  # media bodies read to measure the out/in ratios (0 with a previous run)
    seconds: float = 0.0  # wall time of this subset's estimate
    fixed_hours: float = 0.0  # _total: a run's start-up and end, whatever it works on
    missing_why: str | None = None  # the commonest reasons references have no source, with their counts


ESTIMATES = arrow_schema(EstimateRow)
