"""``vlmforge catalog --estimate``: objects, bytes, disk and hours of a run, per subset, before any media
body is read. The front door: :func:`estimate_release` (and the report's pieces ``flows/`` prints).

It runs the stages' own code (the catalog, the parser, the fetch stage's recipe order, readers and HTTP
client, the media stage's normaliser for a decoded sample) without their side effects, and reads an earlier
run's figures through ``ops``' DuckDB views, so it comes last in the import order.
"""

from ..fetch import DEFAULT_PROBE_SAMPLE
from .estimate_report import as_json, as_markdown, estimate_table, footnotes, versus_hours, versus_table
from .estimated_run import estimate_config, estimate_fields
from .hours import parse_bandwidth
from .release_estimate import DEFAULT_BANDWIDTH_TEXT, DEFAULT_DECODE_SAMPLE, EstimateOptions, estimate_release

__all__ = [
    "DEFAULT_BANDWIDTH_TEXT",
    "DEFAULT_DECODE_SAMPLE",
    "DEFAULT_PROBE_SAMPLE",
    "EstimateOptions",
    "as_json",
    "as_markdown",
    "estimate_config",
    "estimate_fields",
    "estimate_release",
    "estimate_table",
    "footnotes",
    "parse_bandwidth",
    "versus_hours",
    "versus_table",
]
