"""The summary table printed at the end of ``vlmforge run`` and ``vlmforge refresh``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the flow module imports Prefect: not needed to print a table
    from .pipeline import RunSummary

console = Console()


def print_summary(summary: RunSummary) -> None:
    """The per-subset table a run (or a refresh) ends with."""
    t = Table(title=f"vlmforge run {summary.run_id} ({summary.seconds:.1f} s) -> {summary.out}")
    for col in (
        "subset",
        "license",
        "rows",
        "ok",
        "rejected",
        "dropped",
        "images",
        "videos",
        "tokens",
        "gate",
    ):
        t.add_column(
            col,
            justify="right"
            if col in ("rows", "ok", "rejected", "dropped", "images", "videos", "tokens")
            else "left",
            overflow="fold",
        )
    for s in summary.subsets:
        st = s.stats
        gate = ("[green]" if s.published else "[red]") + (s.error or s.gate)[:200]
        t.add_row(
            s.subset,
            s.license,
            str(st.lines),
            str(st.ok),
            str(st.rejected),
            str(st.dropped),
            str(st.images),
            str(st.videos),
            f"{st.text_tokens + st.visual_tokens:,}",
            gate,
        )
    console.print(t)
