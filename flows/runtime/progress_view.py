"""What the person running ``vlmforge run`` watches: per-subset batches, rows/s, images/s, an ETA and the
stages as they start, live on a terminal and as plain lines when the output is piped (CI, a log file).

:class:`RunProgress` holds the counts the flow reports through :mod:`flows.runtime.progress`; a view renders
them: :class:`LiveView` (a rich ``Live`` table, redrawn a few times a second, showing the subsets at work) or
:class:`LineView` (one line per stage start, per subset whose batches are done and per tenth of all batches: a
log that reads in order). Rates count the batches this run did (a resumed run's skipped batches are done
already, not fast); the ETA is the rows left at that rate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import IO, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text


@dataclass
class SubsetProgress:
    batches: int
    rows: int
    done: int = 0
    stage: str = "waiting"


@dataclass
class RunProgress:
    """Counts of one run, as the flow reports them; every rate is over the batch stage's wall time."""

    subsets: dict[str, SubsetProgress] = field(default_factory=dict)
    started: float | None = None  # the batch stage's start (time.monotonic)
    rows_done: int = 0  # rows of finished batches, skipped ones included
    rows_worked: int = 0  # rows of the batches this run processed
    images_worked: int = 0

    @property
    def batches(self) -> tuple[int, int]:
        return sum(s.done for s in self.subsets.values()), sum(s.batches for s in self.subsets.values())

    def rates(self, now: float) -> tuple[float, float]:
        """(rows/s, images/s) of the work this run did."""
        seconds = now - self.started if self.started is not None else 0.0
        if seconds <= 0:
            return 0.0, 0.0
        return self.rows_worked / seconds, self.images_worked / seconds

    def eta(self, now: float) -> float | None:
        rows_per_s, _ = self.rates(now)
        left = sum(s.rows for s in self.subsets.values()) - self.rows_done
        return left / rows_per_s if rows_per_s > 0 and left >= 0 else None

    def headline(self, now: float) -> str:
        done, total = self.batches
        skipped = self.rows_done - self.rows_worked
        if self.rows_worked == 0 and skipped > 0:  # a rerun: every batch so far was current, none worked
            return f"batches {done}/{total} · {skipped:,} rows current, skipped (not redone)"
        rows_per_s, images_per_s = self.rates(now)
        eta = self.eta(now)
        left = f"ETA {_clock(eta)}" if eta is not None and done < total else "ETA -"
        also = f" · {skipped:,} rows skipped (current)" if skipped > 0 else ""
        return (
            f"batches {done}/{total} · {rows_per_s:,.1f} rows/s · {images_per_s:,.1f} images/s · {left}{also}"
        )


def _over(stage: str) -> bool:
    """A subset whose last stage finished and whose next has not started (or never will)."""
    return stage.endswith(" done")


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class ProgressView(Protocol):
    def __enter__(self) -> ProgressView: ...
    def __exit__(self, *exc: object) -> None: ...
    def stage_started(self, stage: str, total: int) -> None: ...
    def subset_stage(self, subset: str) -> None: ...
    def batch_done(self, subset: str) -> None: ...


class LineView:
    """Plain lines, in order, for a pipe: stage starts, subsets whose batches are done, every tenth."""

    def __init__(self, progress: RunProgress, out: IO[str]) -> None:
        self.p, self.out = progress, out
        self._tenth = 0

    def __enter__(self) -> LineView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.out.flush()

    def _say(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def stage_started(self, stage: str, total: int) -> None:
        if stage == "batches":
            rows = sum(s.rows for s in self.p.subsets.values())
            self._say(f"batches: {total} over {len(self.p.subsets)} subsets ({rows:,} rows)")
        else:
            self._say(f"{stage}: started")

    def subset_stage(self, subset: str) -> None:
        stage = self.p.subsets[subset].stage
        if stage == "validate done":
            self._say(f"{subset}: done")
        elif not _over(stage):  # a start, not the end of one (the next start follows at once)
            self._say(f"{subset}: {stage}")

    def batch_done(self, subset: str) -> None:
        s = self.p.subsets[subset]
        done, total = self.p.batches
        tenth = done * 10 // max(total, 1)
        if s.done == s.batches or tenth > self._tenth:
            self._tenth = tenth
            self._say(f"{subset} {s.done}/{s.batches} · {self.p.headline(time.monotonic())}")


class LiveView:
    """A live table on the terminal: the subsets at work, then one line of totals, rates and ETA."""

    MAX_ROWS = 12  # a release of 76 subsets shows the ones at work, not a screenful of waiting ones

    def __init__(self, progress: RunProgress, console: Console) -> None:
        self.p = progress
        self.live = Live(console=console, refresh_per_second=4, transient=False, get_renderable=self.render)

    def __enter__(self) -> LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def render(self) -> Group:
        table = Table(box=None, pad_edge=False, show_edge=False)
        table.add_column("subset", no_wrap=True)
        table.add_column("batches", justify="right", no_wrap=True)
        table.add_column("stage", no_wrap=True)
        busy = [(n, s) for n, s in self.p.subsets.items() if s.stage != "waiting" and not _over(s.stage)]
        for name, s in busy[: self.MAX_ROWS]:
            table.add_row(name, f"{s.done}/{s.batches}", s.stage)
        states = [s.stage for s in self.p.subsets.values()]
        more = len(busy) - self.MAX_ROWS
        tail = f" (+{more} more at work)" if more > 0 else ""
        over = sum(1 for stage in states if _over(stage))
        counts = f"{states.count('waiting')} waiting, {over} done{tail}"
        return Group(table, Text(f"{self.p.headline(time.monotonic())} · {counts}"))

    def stage_started(self, stage: str, total: int) -> None:
        self.live.refresh()

    def subset_stage(self, subset: str) -> None:
        self.live.refresh()

    def batch_done(self, subset: str) -> None:
        pass  # redrawn by the timer


def process_seconds() -> float:
    """Wall seconds since this process started (what the summary reports: start-up included)."""
    import psutil

    return max(0.0, time.time() - psutil.Process().create_time())
