"""The hours of ``catalog --estimate`` (issue 43, item 1): items' work plus the fixed costs a run pays
whatever it works on (start-up, each batch task, each subset's gate, publish and read-back), measured on the
latest run in OUT that did work, and set beside what the run took. No service is started: the ``runs``
table is written as a run writes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.tasks.estimate.estimate_report import human_hours
from vlmforge.tasks.estimate.hours import (
    DEFAULT_STARTUP_SECONDS,
    Rates,
    measured_rates,
    rates_of_run,
    run_hours,
)
from vlmforge.tasks.estimate.versus import run_hours_after
from vlmforge.tasks.ops import RUN_WIDE, StageTime, write_outside_time, write_stage_times

CORES = 2


def _times(subsets: int, batches_each: int, *, worked: bool = True) -> list[StageTime]:
    """A run's rows as the flow writes them: per subset its batch stages, run-wide the spans."""
    times = []
    for i in range(subsets):
        name = f"s{i:02d}"
        n = batches_each if worked else 0
        stats = {"media": 3.0, "parse": 0.01, "tokens": 0.05, "write": 0.2, "setup": 0.4}
        for stage, secs in stats.items():
            items = (20 if stage == "media" else 10) if worked else 0
            times.append(StageTime(name, stage, secs if worked else 0.0, items, None, None, n))
        times.append(StageTime(name, "batches", 3.66 if worked else 0.0, 10, "rows", None, batches_each))
    times += [
        StageTime(RUN_WIDE, "catalog", 0.2, subsets, "subsets"),
        StageTime(RUN_WIDE, "batches", 30.0, 10 * subsets, "rows"),
        StageTime(RUN_WIDE, "gate", 40.0, subsets if worked else 0, "subsets"),
        StageTime(RUN_WIDE, "publish", 40.0, subsets if worked else 0, "subsets"),
        StageTime(RUN_WIDE, "run", 90.0 if worked else 3.0, 10 * subsets, "rows"),
    ]
    return times


def _run(out: Path, run_id: str, started: str, *, worked: bool = True, outside: float = 21.0) -> None:
    write_stage_times(
        str(out), run_id, _times(8, 2, worked=worked), started_at=started, source_format="nemotron"
    )
    write_outside_time(str(out), run_id, outside, CORES)


def _estimate_seconds(rates: Rates, subsets: int, batches_each: int) -> float:
    hours = run_hours(
        images=20 * subsets,
        videos=0,
        rows=10 * subsets,
        fetch_bytes=0,
        disk_bytes=0,
        cores=CORES,
        bandwidth=1e9,
        rates=rates,
        batches=subsets * batches_each,
        subsets=subsets,
    )
    return (rates.fixed_hours + hours.total) * 3600


def test_rates_measured_on_a_run_give_back_its_wall_for_the_same_release(tmp_path: Path) -> None:
    _run(tmp_path, "20261206T050000-aaaaaa", "2026-12-06T05:00:00Z")
    rates = measured_rates(str(tmp_path))
    assert rates is not None and rates.source == "runs table (20261206T050000-aaaaaa)"
    assert rates.startup_seconds == 21.0 and rates.warmup_seconds == 0.0
    # the run's wall: its time outside the flow and the flow's, less the catalog the estimate does itself
    assert _estimate_seconds(rates, 8, 2) == pytest.approx(21.0 + 90.0 - 0.2, rel=1e-6)
    # a release of more subsets and batches costs more by its per-subset and per-batch figures
    assert _estimate_seconds(rates, 16, 2) > _estimate_seconds(rates, 8, 2) + 30


def test_a_rerun_that_did_no_work_does_not_replace_the_measured_rates(tmp_path: Path) -> None:
    _run(tmp_path, "20261206T050000-aaaaaa", "2026-12-06T05:00:00Z")
    _run(tmp_path, "20261206T060000-bbbbbb", "2026-12-06T06:00:00Z", worked=False, outside=15.0)
    rates = measured_rates(str(tmp_path))
    assert rates is not None and rates.source == "runs table (20261206T050000-aaaaaa)"


def test_without_a_measured_run_the_stated_defaults_include_the_fixed_costs() -> None:
    rates = Rates()
    assert rates.source == "default" and rates.fixed_hours * 3600 >= DEFAULT_STARTUP_SECONDS
    # 76 one-batch subsets cost more than 4 at the same items: each subset's stages and batch task
    assert (
        _estimate_seconds(rates, 76, 1) - _estimate_seconds(rates, 4, 1)
        > 72 * (rates.subset_seconds + rates.batch_seconds) / CORES * 0.99
    )
    # a run recorded without its process's time (a deployment's) keeps the default start-up
    assert rates_of_run("r", {(True, "run"): (50.0, 10, 0)}).startup_seconds == DEFAULT_STARTUP_SECONDS


def test_the_actual_hours_are_the_wall_of_the_first_run_after_the_estimate(tmp_path: Path) -> None:
    _run(tmp_path, "20261206T050000-aaaaaa", "2026-12-06T05:00:00Z", outside=21.0)  # before the estimate
    _run(tmp_path, "20261206T051000-cccccc", "2026-12-06T05:10:00Z", outside=19.0)  # the run it was for
    _run(tmp_path, "20261206T052000-dddddd", "2026-12-06T05:20:00Z", worked=False, outside=15.0)  # a rerun
    hours = run_hours_after(str(tmp_path), "20261206T050500.000000Z")
    assert hours == pytest.approx((19.0 + 90.0) / 3600)
    assert run_hours_after(str(tmp_path), "20261206T060000.000000Z") is None  # no run since


@pytest.mark.parametrize(
    ("seconds", "shown"), [(45, "45s"), (144, "2m24s"), (599, "9m59s"), (38 * 60, "38m"), (9000, "2.5h")]
)
def test_hours_read_at_a_glance_in_five_characters(seconds: float, shown: str) -> None:
    assert human_hours(seconds / 3600) == shown
