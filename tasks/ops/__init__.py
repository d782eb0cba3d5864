"""What people run on a finished output: DuckDB queries over its manifests, statistics and stage times,
packing plans, training mixes, and the media store's clean-up."""

from __future__ import annotations

from .mix.output import format_mix, write_mix
from .mix.plan import MixPlan
from .mix.weights import parse_count
from .plan.packing import PlanResult, build_plan
from .query import FORMAT_NAMES, connect, render, run_query, text_rows
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
    "FORMAT_NAMES",
    "MixPlan",
    "PlanResult",
    "RUN_WIDE",
    "StageTime",
    "StatsReport",
    "batch_stage_times",
    "build_plan",
    "connect",
    "format_mix",
    "parse_count",
    "plan_clean",
    "remove_unreferenced",
    "render",
    "run_query",
    "store_of",
    "text_rows",
    "write_mix",
    "write_outside_time",
    "write_stage_times",
    "write_stats_report",
]
