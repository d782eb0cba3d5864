"""The run's progress: per-subset batches, rates and ETA, shown live on a terminal or as plain lines when
piped, and only counted without a view. The views are driven with the flow's own calls; rates are computed
from a start time set by the test (no clock is waited on)."""

from __future__ import annotations

import io

from rich.console import Console

from vlmforge.flows.narrow_tables import compact
from vlmforge.flows.runtime import progress
from vlmforge.flows.runtime.progress_view import LiveView, RunProgress


def _drive() -> None:
    progress.subsets([("docvqa", 2, 100), ("chartqa", 1, 50)])
    progress.stage("batches", 3)
    progress.batch_finished("docvqa", 50, 10, skipped=False)
    progress.batch_finished("docvqa", 50, 10, skipped=False)
    progress.stage("gate", 2)
    progress.subset_stage("docvqa", "gate")
    progress.advance("gate", subset="docvqa")


def test_piped_progress_is_plain_lines_in_order() -> None:
    out = io.StringIO()
    with progress.terminal_progress(live=False, stream=out) as run:
        _drive()
        assert run.subsets["docvqa"].done == 2 and run.subsets["chartqa"].done == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == "batches: 3 over 2 subsets (150 rows)"
    assert lines[1].startswith("docvqa 1/2 · batches 1/3 · ")  # a third of all batches: a line
    assert lines[2].startswith("docvqa 2/2 · batches 2/3 · ")  # the subset's batches are done
    assert " rows/s · " in lines[2] and " images/s · ETA " in lines[2]
    assert lines[3:] == ["gate: started", "docvqa: gate"]  # "gate done" is not a start: no line


def test_rates_count_worked_batches_and_the_eta_the_rows_left() -> None:
    run = RunProgress(started=100.0)
    run.subsets = {"a": progress.SubsetProgress(4, 400)}
    run.rows_done, run.rows_worked, run.images_worked = 200, 100, 30  # 100 rows were skipped (resumed)
    assert run.rates(now=110.0) == (10.0, 3.0)
    assert run.eta(now=110.0) == 20.0  # 200 rows left at 10 rows/s
    assert "ETA 0:00:20" in run.headline(now=110.0)


def test_the_live_view_shows_the_subsets_at_work() -> None:
    run = RunProgress(started=0.0)
    run.subsets = {
        "docvqa": progress.SubsetProgress(2, 100, done=1, stage="batches"),
        "chartqa": progress.SubsetProgress(1, 50),
        "ocr": progress.SubsetProgress(1, 10, done=1, stage="validate done"),
    }
    console = Console(width=80, file=io.StringIO(), force_terminal=False)
    console.print(LiveView(run, console).render())
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "docvqa" in text and "1/2" in text and "chartqa" not in text and "ocr" not in text
    assert "1 waiting, 1 done" in text


def test_without_a_view_calls_only_count() -> None:
    with progress.terminal_progress(enabled=False) as run:
        progress.subsets([("a", 1, 5)])
        progress.batch_finished("a", 5, 0, skipped=True)
        assert progress._view is None and run.subsets["a"].done == 1
        assert (run.rows_done, run.rows_worked) == (5, 0)


def test_counts_are_short_and_exact_below_a_hundred_thousand() -> None:
    assert [compact(n) for n in (0, 99_999, 100_000, 1_234_567, 12_345_678_901)] == [
        "0",
        "99999",
        "100k",
        "1.23M",
        "12.3G",
    ]
