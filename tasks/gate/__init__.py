"""The quality gate: Great Expectations suites (``expectations/*.json``) over DuckDB profiles of a subset's
manifests and its staged Energon dataset; a subset that fails is not published.

Modules, each depending only on those above it:

    suites.py    the suites' names and JSON
    params.py    the suites' parameters: defaults, run options, per-subset overrides
    results.py   GateResult; recording results under OUT/quality/<run>/ and reading them back
    drift.py     the last published run's counts (the baseline) and the drift profile
    profiles.py  the DuckDB views over the manifests and the profile SQL
    gx.py        a quiet Great Expectations context
    validate.py  one suite over one profile; a readable line per failure, with example rows
    check.py     the gate of one subset (samples, media, drift)
    groups.py    the gate of several subsets, one validation per suite over their profiles
    shards.py    the shards suite on the staged dataset, run before the swap
    report.py    the results for people: CLI rows, Markdown artifact, the HTML report page
    doc_assets.py  the pages' stylesheet and images, shared by the runs of an output folder (_assets/)
    docs.py      Data Docs: GX's site made offline, under the report page, and the results index
"""

from __future__ import annotations

from .check import gate_subset
from .docs import build_data_docs
from .gate_report import quality_markdown, quality_rows
from .groups import gate_subsets
from .params import load_overrides
from .profiles import ManifestParts, Source, add_shard_views, open_views, shards_profile
from .results import GateResult, RunQuality, carry_results, load_run, record_gate, record_run
from .suite_run import run_suite, shorten
from .suites import SUITES, suites_digest

__all__ = [
    "GateResult",
    "ManifestParts",
    "RunQuality",
    "SUITES",
    "Source",
    "add_shard_views",
    "build_data_docs",
    "carry_results",
    "gate_subset",
    "gate_subsets",
    "load_overrides",
    "load_run",
    "open_views",
    "quality_markdown",
    "quality_rows",
    "record_gate",
    "record_run",
    "run_suite",
    "shards_profile",
    "shorten",
    "suites_digest",
]
