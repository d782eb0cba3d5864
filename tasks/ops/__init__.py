from __future__ import annotations

from .mix.output import format_mix, write_mix
from .mix.plan import MixPlan
from .mix.weights import parse_count
from .plan.packing import PlanResult, build_plan
from .query import FORMAT_NAMES, connect, render, run_query, text_rows
from .sample_release.sample_build import build_sample_release
from .stats.compute import StatsReport
from .stats.page import write_stats_report
from .stats.stage_times import RUN_WIDE, StageTime, batch_stage_times, write_stage_times

__all__ = [
    "FORMAT_NAMES",
    "MixPlan",
    "PlanResult",
    "RUN_WIDE",
    "StageTime",
    "StatsReport",
    "batch_stage_times",
    "build_plan",
    "build_sample_release",
    "connect",
    "format_mix",
    "parse_count",
    "render",
    "run_query",
    "text_rows",
    "write_mix",
    "write_stage_times",
    "write_stats_report",
]
