"""Result tables that read at 80 columns (a pipe, CI, a small terminal): short headers that never wrap,
numbers that never break, and the free text (gate results, reasons) folding in the room that is left.

At 80 columns rich shares the width out evenly, so every header and number broke across lines (``subse t``,
``passe d``, ``12345 / 67``). Counts over five digits are written short (``1.23M``); the exact figures are
in the manifests, the artifact and ``--format json``.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

_UNITS = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def compact(n: int) -> str:
    """``12345`` as is; ``1234567`` -> ``1.23M``: at most five characters for any count under 10^15."""
    if abs(n) < 100_000:
        return str(n)
    for size, unit in _UNITS:
        if abs(n) >= size:
            value = n / size
            text = (
                f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"
            )
            return text + unit
    return str(n)


def narrow_table(title: str | None = None, *, lines: bool = False) -> Table:
    """A table with a light frame (fewer columns spent on borders) and headers that keep to one line."""
    return Table(
        title=Text(title, overflow="fold") if title else None,  # a long path folds, never cut
        box=box.SIMPLE_HEAD,
        show_lines=lines,
        pad_edge=False,
        padding=(0, 1, 0, 1),
        collapse_padding=True,  # one space between columns, not two
    )


def add_fixed(table: Table, header: str, *, right: bool = False, width: int | None = None) -> None:
    """A column that never wraps: its header and cells keep their full width (short values only)."""
    table.add_column(
        header,
        justify="right" if right else "left",
        no_wrap=True,
        min_width=max(len(header), width or 0),
    )


def add_text(table: Table, header: str, *, min_width: int = 12) -> None:
    """A column that folds (names, free text) when the fixed columns leave too little room, its header
    whole (rich shrinks the widest of these first)."""
    table.add_column(header, overflow="fold", min_width=max(len(header), min_width))


def print_whole(console: Console, table: Table) -> None:
    """``table`` on a terminal as it fits; piped (a file, another program), at the table's natural width,
    so no cell is cut inside a word (a hash, a path, a subset name folded into 5-character columns)."""
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(width=10_000), table).maximum
    wide = Console(file=console.file, width=max(natural, console.width), color_system=None)
    wide.print(table)
