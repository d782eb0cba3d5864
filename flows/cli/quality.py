"""``vlmforge quality OUT``: the quality gate's results of a run, as a table (or JSON).

It reads the recorded results only (``OUT/quality/<run>/``), so it needs neither DuckDB nor Great
Expectations.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ...tasks.errors import ConfigError
from ...tasks.gate import SUITES, RunQuality, load_run, quality_rows
from ...tasks.manifests import OutputLayout
from ..narrow_tables import add_fixed, add_text, narrow_table

QUALITY_EXAMPLES = """
Examples:

  vlmforge quality ./out

  vlmforge quality ./out --run 20260102T030405-a1b2c3 --format json
"""


def register(app: typer.Typer) -> None:
    """Add the ``quality`` command to ``app``."""
    app.command("quality", epilog=QUALITY_EXAMPLES)(quality)


def quality(
    out: Annotated[str, typer.Argument(help="output folder of a run")],
    run: Annotated[str | None, typer.Option("--run", help="run id (default: the latest run)")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table | json")] = "table",
) -> None:
    """Show the quality gate's results of the latest run (or --run): per subset, per suite, and why."""
    if fmt not in ("table", "json"):
        raise ConfigError(f"--format {fmt!r}: expected table or json")
    result = load_run(OutputLayout(out), run)
    rows = quality_rows(result)
    if fmt == "json":
        _print_json(Console(), result, rows)
    else:
        _print_table(Console(), result, rows)


def _print_json(console: Console, result: RunQuality, rows: list[dict[str, str]]) -> None:
    data = {
        "run_id": result.run_id,
        "skip_gate": result.skip_gate,
        "overrides": result.overrides,
        "failed": result.failed,
        "docs": result.docs,
        "subsets": [r | {"failures": r["failures"].splitlines()} for r in rows],
    }
    console.print_json(json.dumps(data))


def _print_table(console: Console, result: RunQuality, rows: list[dict[str, str]]) -> None:
    title = f"quality gate of run {result.run_id}"
    if result.skip_gate:
        title += " (gate skipped: --skip-gate)"
    table = narrow_table(title, lines=True)  # readable at 80 columns: headers and verdicts never wrap
    add_text(table, "subset", min_width=8)
    add_fixed(table, "result", width=6)
    for suite in SUITES:
        add_fixed(table, suite, width=6)
    add_text(table, "what failed")
    colour = {"passed": "green", "failed": "red"}
    for r in rows:
        cells = [f"[{colour.get(r['result'], 'yellow')}]{r['result']}"]
        cells += [("[red]" if r[s] == "FAILED" else "") + r[s] for s in SUITES]
        table.add_row(escape(r["subset"]), *cells, escape(r["failures"]))
    console.print(table)
    if result.docs:
        console.print(f"Data Docs: {escape(result.docs)}")
    if result.overrides:
        console.print(f"gate overrides: {escape(', '.join(result.overrides))}")
