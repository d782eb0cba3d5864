"""The ``vlmforge`` command line: thin wrappers over the flows and tasks.

Only the project's own errors (``VlmforgeError``) become one-line messages; anything else is a bug and keeps
its traceback (set ``VLMFORGE_DEBUG=1`` to see tracebacks for our errors too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ...schemas.tables import TABLES
from ...tasks.errors import ConfigError, VlmforgeError
from ..narrow_tables import print_whole
from ..runtime.embedded import apply_quiet_env
from .one_line_errors import OneLineErrorsGroup
from .options import TrainerOption, config_options, with_config_options, with_trainer

apply_quiet_env()

app = typer.Typer(
    name="vlmforge",
    cls=OneLineErrorsGroup,  # usage errors (click's, the config's, the preflight's): one line, exit 2
    help="Turn vision-language training releases into verified, token-counted Megatron-Energon shards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err = Console(stderr=True)

RUN_EXAMPLES = """
Examples:

  vlmforge run ./Nemotron-Image-Training-v3 --out ./out --subset docvqa --subset chartqa_1

  vlmforge run ./release --out ./out --max-pixels 1003520 --max-num-images 10 --seq-len 16384

  vlmforge run hf://datasets/TIGER-Lab/Mantis-Instruct --format mantis --config nlvr2 --out ./out

  vlmforge run ./LLaVA-Video-178K --format llava_video --config 0_30_s_academic_v0_1 --out ./out
"""


@app.command(epilog=RUN_EXAMPLES)
@config_options(skip=("release",))
def run(
    ctx: typer.Context,
    release: Annotated[str, typer.Argument(help="release folder or fsspec URL (one folder per subset)")],
    trainer: TrainerOption = None,
    wait_lock: Annotated[
        bool,
        typer.Option(
            help="another run holds --out: wait for it to end instead of refusing",
            rich_help_panel="Execution",
        ),
    ] = False,
    no_disk_check: Annotated[
        bool,
        typer.Option(
            "--no-disk-check",
            help="start even when the estimated disk of the run does not fit the output's free space",
            rich_help_panel="Execution",
        ),
    ] = False,
    disk_reserve: Annotated[
        str | None,
        typer.Option(
            metavar="SIZE",
            help="disk check: keep this much free on the output's file system as well (10GB, 1TB, ...)",
            rich_help_panel="Execution",
        ),
    ] = None,
    **options: Any,
) -> None:
    """Catalog, parse, verify media, count tokens, gate and write Energon shards."""
    from pydantic import ValidationError

    from ...schemas.config import RunConfig
    from ...tasks.errors import UsageError
    from ...tasks.media import accepted_image_formats
    from .one_line_errors import usage_error_of
    from .preflight import preflight_run

    try:
        given = with_config_options(options) | {"release": release}
        cfg = RunConfig.of(**with_trainer(ctx, trainer, given))
    except ValidationError as exc:  # say which option, the value given and why, on one line
        raise usage_error_of(exc) from None
    try:
        accepted_image_formats(cfg.media.extra_image_formats)
    except ValueError as exc:  # an unknown format name
        raise UsageError(f"--accept-image-format: {exc}") from None
    from ..runtime.embedded import embedded_runtime
    from ..runtime.executors import runner_for

    # every mistake that can be found before Prefect and Ray start is found here (one line, exit 2)
    cfg = preflight_run(cfg, say=_note)
    if not no_disk_check:  # before anything is fetched: the estimated disk against the free space
        from ...schemas.option_values import size_bytes
        from .disk_check import check_disk

        try:
            reserve = size_bytes(disk_reserve) if disk_reserve else 0
        except ValueError as exc:
            raise UsageError(f"--disk-reserve: {exc}") from None
        check_disk(cfg, reserve, say=_note)
    from ..runtime.progress import terminal_progress
    from ..summary import print_summary

    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_OwnErrorsWithoutTraceback())
    from ..runtime.embedded import configured_api_url
    from ..runtime.interrupt import cancels_flow_run, stops_cleanly
    from ..runtime.run_lock import run_lock
    from .run_banner import prefect_line, ray_line

    runner = runner_for(cfg)
    api_url = configured_api_url()  # None: the run starts a Prefect server of its own, gone when it ends
    with stops_cleanly("run"), run_lock(cfg.out, wait=wait_lock, say=_note):
        _note(ray_line(cfg.execution))
        _note(prefect_line(api_url))
        # The flow's imports and Ray's start run while the Prefect server boots.
        with embedded_runtime(runner, while_booting=_import_flow), terminal_progress():
            from ..pipeline import run_release

            with cancels_flow_run():
                summary = run_release.with_options(task_runner=runner)(cfg)
    from ..runtime.progress_view import process_seconds

    flow_seconds, summary.seconds = summary.seconds, process_seconds()  # what the user waited, start-up too
    _record_outside(cfg, summary.run_id, summary.seconds - flow_seconds)
    print_summary(summary)
    from .run_banner import after_run_lines

    for line in after_run_lines(cfg.out, summary.run_id, api_url):
        _note(line)
    if not summary.subsets:  # a license filter or a remote release that left nothing to do
        err.print(
            "[red]error:[/red] the run found 0 subsets (see the catalog line; --subset, --license-allow)"
        )
        raise typer.Exit(2)
    if summary.failed:
        err.print(f"[red]not published:[/red] {', '.join(summary.failed)} (see the gate column above)")
    if summary.unreadable:
        err.print(
            f"[red]read back wrong:[/red] {', '.join(summary.unreadable)} (see the validation column above; "
            "`vlmforge validate OUT` reads every sample)"
        )
    if summary.failed or summary.unreadable:
        raise typer.Exit(1)


def _record_outside(cfg: Any, run_id: str, seconds: float) -> None:
    """The run's time outside its flow (start-up, the summary), in its ``runs`` rows: the estimate's start-up
    (never fails the run: it is a measurement)."""
    from ...tasks.ops import write_outside_time
    from ..runtime.executors import executor_cpus

    with contextlib.suppress(Exception):
        write_outside_time(cfg.out, run_id, seconds, executor_cpus(cfg.execution))


def _note(line: str) -> None:
    """A line of the run's own on stderr, as written (paths and URLs are not rich markup)."""
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def _import_flow() -> None:
    from .. import pipeline  # noqa: F401 - imported while the services start


class _OwnErrorsWithoutTraceback(logging.Filter):
    """Prefect logs a failed flow's traceback; for the project's own errors (disk full, bad input) the
    one-line message the CLI prints is the whole story (``VLMFORGE_DEBUG=1`` keeps the traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, VlmforgeError) and not os.environ.get("VLMFORGE_DEBUG"):
            record.exc_info, record.exc_text = None, None
        return True


@app.command()
def query(
    out: Annotated[str, typer.Argument(help="output folder of a run")],
    sql: Annotated[str, typer.Argument(help=f"SQL over the views {', '.join(TABLES)}")],
    fmt: Annotated[str, typer.Option("--format", help="table | csv | json")] = "table",
    allow_external_access: Annotated[
        bool,
        typer.Option(
            "--allow-external-access",
            help="let the SQL read/write other files and URLs and load extensions (default: manifests only)",
        ),
    ] = False,
) -> None:
    """Run DuckDB SQL over a run's manifests (list and struct columns as JSON in csv and table)."""
    from ...tasks.ops import FORMAT_NAMES, render, run_query, text_rows

    if fmt not in FORMAT_NAMES:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMAT_NAMES)}")
    table = run_query(out, sql, allow_external_access=allow_external_access)
    if fmt == "table":
        t = Table()
        for name in table.column_names:
            t.add_column(name, overflow="fold")
        for row in text_rows(table):
            t.add_row(*row)
        print_whole(console, t)
    elif fmt == "json":
        console.print_json(render(table, fmt))
    else:
        sys.stdout.write(render(table, fmt))
        sys.stdout.flush()


@app.command("sample-release")
def sample_release(
    dest: Annotated[Path, typer.Argument(help="folder to create")],
    overwrite: Annotated[bool, typer.Option(help="replace dest if it exists")] = False,
    shape: Annotated[
        str, typer.Option(help="sample (4 hand-made subsets) | v3 (76 long-tailed subsets, --rows rows)")
    ] = "sample",
    rows: Annotated[int, typer.Option(help="rows of a --shape v3 release")] = 400,
    mix: Annotated[str, typer.Option(help="--shape v3 rows: v3 (every kind) | images | text")] = "v3",
) -> None:
    """Build the small sample release (real photos and a real video from scikit-image, plus bad input), or
    a release of v3's shape (see tasks/sample_release/shaped.py)."""
    from ...tasks.sample_release import build_sample_release, build_shaped_release

    if shape == "v3":
        shaped = build_shaped_release(dest, rows, mix=mix, overwrite=overwrite)
        console.print(
            f"release: {shaped.root} ({len(shaped.subsets)} subsets, {shaped.total_lines} lines); serve "
            f"{shaped.upstream} over HTTP, set VLMFORGE_SHAPED_UPSTREAM to its URL, run with --recipes "
            f"{shaped.recipes} --env-allow VLMFORGE_SHAPED_UPSTREAM"
        )
        return
    rel = build_sample_release(dest, overwrite=overwrite)
    console.print(f"sample release: {rel.root} ({len(rel.subsets)} subsets, {rel.total_lines} lines)")


def _register_commands() -> None:
    # One module per command family keeps this file about `run`; each adds its commands to `app`.
    from . import catalog, energon, quality, recipe, schedule, server, store, tokens, worker

    for module in (catalog, recipe, tokens, energon, quality, server, worker, schedule, store):
        module.register(app)


_register_commands()


def main() -> None:
    try:
        app()
    except VlmforgeError as exc:
        if os.environ.get("VLMFORGE_DEBUG"):
            raise
        # usage errors never get here: the app's group prints them as one line (flows/cli/one_line_errors.py)
        err.print(f"[red]error:[/red] {exc}\n(set VLMFORGE_DEBUG=1 for the traceback)", soft_wrap=True)
        sys.exit(2)
