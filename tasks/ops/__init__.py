from __future__ import annotations

from .estimate import (
    EstimateOptions,
    as_json,
    as_markdown,
    estimate_config,
    estimate_fields,
    estimate_release,
    estimate_table,
    footnotes,
    parse_bandwidth,
    versus_actual,
    versus_hours,
    versus_table,
)
from .mix.output import format_mix, write_mix
from .mix.plan import MixPlan
from .mix.weights import parse_count
from .plan.packing import PlanResult, build_plan
from .query import FORMAT_NAMES, connect, render, run_query, text_rows
from .sample_release.sample_build import build_sample_release
from .sample_release.shaped import build_shaped_release
from .stats.compute import StatsReport
from .stats.page import write_stats_report
from .stats.stage_times import (
    RUN_WIDE,
    StageTime,
    batch_stage_times,
    write_outside_time,
    write_stage_times,
)
from .store_clean import CleanPlan, plan_clean, remove_unreferenced, store_of

__all__ = [
    "CleanPlan",
    "EstimateOptions",
    "FORMAT_NAMES",
    "MixPlan",
    "PlanResult",
    "RUN_WIDE",
    "StageTime",
    "StatsReport",
    "as_json",
    "as_markdown",
    "batch_stage_times",
    "build_plan",
    "build_sample_release",
    "build_shaped_release",
    "connect",
    "estimate_config",
    "estimate_fields",
    "estimate_release",
    "estimate_table",
    "footnotes",
    "format_mix",
    "parse_bandwidth",
    "parse_count",
    "plan_clean",
    "remove_unreferenced",
    "render",
    "run_query",
    "store_of",
    "text_rows",
    "versus_actual",
    "versus_hours",
    "versus_table",
    "write_mix",
    "write_outside_time",
    "write_stage_times",
    "write_stats_report",
]
