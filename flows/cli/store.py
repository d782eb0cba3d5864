"""``vlmforge store clean OUT``: list (and with ``--delete`` remove) what in the media store no manifest
of OUT references.

The listing and removal are ``tasks/ops/store_clean.py``; this module holds OUT's run lock for the whole
command (a run in flight stores objects its manifests do not name yet, so nothing is listed or removed while
one holds it, and none can start meanwhile) and prints the result. Registered by ``flows/cli/__init__.py``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ...tasks.errors import OutputError, UsageError
from ...tasks.ops import CleanPlan, plan_clean, remove_unreferenced, store_of
from ..narrow_tables import add_fixed, add_text, compact, narrow_table, print_whole
from ..runtime.run_lock import OutputBusy, describe, run_lock

SHOWN = 100  # rows of the table; the summary line counts them all

store_app = typer.Typer(
    name="store", help="The media store: what no output references, and removing it.", no_args_is_help=True
)

STORE_EXAMPLES = """
Examples:

  vlmforge store clean ./out

  vlmforge store clean ./out --delete

  vlmforge store clean ./out_a ./out_b --store /data/shared-store --delete
"""


def register(app: typer.Typer) -> None:
    """Add the ``store`` commands to ``app``."""
    app.add_typer(store_app, name="store")


@store_app.command("clean", epilog=STORE_EXAMPLES)
def clean(
    out: Annotated[list[str], typer.Argument(help="output folder(s); name every output that uses the store")],
    store: Annotated[
        str | None,
        typer.Option(help="the store (default: the --store of OUT's last run, else OUT/store)"),
    ] = None,
    delete: Annotated[
        bool, typer.Option("--delete", help="remove the listed objects (default: list)")
    ] = False,
) -> None:
    """List the store's objects that no manifest of OUT references (published subsets, committed batches
    of unpublished ones, staged sources), with their size; --delete removes those files and nothing else."""
    outs = out
    for folder in outs:
        if "://" in folder:
            raise UsageError(f"store clean works on local outputs only; {folder} is a URL")
        if not Path(folder, "manifests").is_dir():
            raise UsageError(f"{folder} has no manifests/: not a vlmforge output", "give the --out of a run")
    if store is None:
        stores = {store_of(folder) for folder in outs}
        if len(stores) > 1:
            raise UsageError(
                f"these outputs use different stores ({', '.join(sorted(stores))})", "give --store"
            )
        store = stores.pop()
    console = Console()
    with contextlib.ExitStack() as held:
        for folder in outs:
            try:
                held.enter_context(run_lock(folder))
            except OutputBusy as busy:
                raise UsageError(
                    f"{folder} is in use by a vlmforge run ({describe(busy.holder)})",
                    "clean when it has ended",
                ) from None
        try:
            plan = plan_clean(store, outs)
            removed, freed = remove_unreferenced(plan) if delete else (0, 0)
        except OutputError as exc:  # a store that is not local, a path that leads out of it
            raise UsageError(str(exc)) from None
        if delete:
            console.print(
                f"store {plan.root}: removed {removed} objects ({freed} bytes) that no manifest references; "
                f"kept {plan.objects - removed}",
                soft_wrap=True,
            )
            return
        _report(console, plan)


def _report(console: Console, plan: CleanPlan) -> None:
    n, size = len(plan.candidates), plan.candidate_bytes
    console.print(
        f"store {plan.root}: {n} of {plan.objects} objects ({size} of {plan.object_bytes} bytes) referenced "
        f"by no manifest; dry run{', --delete removes them' if n else ''}",
        soft_wrap=True,
    )
    if not n:
        return
    table = narrow_table()
    add_fixed(table, "object", width=16)
    add_fixed(table, "bytes", right=True)
    add_text(table, "fetched from")
    for item in plan.candidates[:SHOWN]:
        table.add_row(item.sha256[:16], compact(item.bytes), item.upstream or "-")
    print_whole(console, table)
    if n > SHOWN:
        console.print(f"... and {n - SHOWN} more", soft_wrap=True)
