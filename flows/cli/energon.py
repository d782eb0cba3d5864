"""``vlmforge mix`` and ``vlmforge validate``: training mixes over a run's Energon datasets, and their check.

Registered on the main app by ``flows/cli/__init__.py`` (``energon.register(app)``). Heavy imports
(DuckDB, megatron-energon, torch) stay inside the commands.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .options import config_options, with_config_options

MIX_EXAMPLES = """
Examples:

  vlmforge mix ./out --name ocr_heavy --weights "docvqa=2,chartqa_*=1,plotqa_1=0.5"

  vlmforge mix ./out --name commercial --license-allow CC-BY-4.0 --license-allow "CC0-*" --by samples

  vlmforge mix ./out --name pilot --weights "docvqa=1,clevr_*=1" --max-tokens 2B
"""

VALIDATE_EXAMPLES = """
Examples:

  vlmforge validate ./out

  vlmforge validate ./out --subset docvqa --sample 100 --workers 2
"""


def register(app: typer.Typer) -> None:
    """Add the ``mix`` and ``validate`` commands to ``app``."""
    app.command(epilog=MIX_EXAMPLES)(mix)
    app.command(epilog=VALIDATE_EXAMPLES)(validate)


@config_options(only=("license_allow",))
def mix(
    out: Annotated[str, typer.Argument(help="output folder of a run")],
    name: Annotated[str, typer.Option("--name", help="mix name: writes OUT/energon/NAME.yaml")],
    weights: Annotated[
        str | None,
        typer.Option(help='"subset=W,glob_*=W,...": exact names beat globs; default: every subset, 1'),
    ] = None,
    by: Annotated[str, typer.Option(help="tokens: weights are token shares | samples: sample shares")] = (
        "tokens"
    ),
    max_tokens: Annotated[
        str | None, typer.Option(help="token budget of the mix, e.g. 2B: larger subsets use a prefix")
    ] = None,
    max_open_files: Annotated[
        int, typer.Option(help="open files a loader worker may keep for the blend (see ulimit -n)")
    ] = 512,
    **options: Any,
) -> None:
    """Write a MetadatasetV2 training blend over the published subsets and print its shares."""
    from ...schemas.option_values import comma_list
    from ...tasks.ops import format_mix, parse_count, write_mix

    allow = list(comma_list(with_config_options(options).get("license_allow")))
    plan = write_mix(
        out,
        name=name,
        weights=weights,
        by=by,  # type: ignore[arg-type]  # checked by plan_mix
        license_allow=allow or None,
        max_tokens=parse_count(max_tokens) if max_tokens is not None else None,
        max_open_files=max_open_files,
    )
    typer.echo(format_mix(plan))
    _warn_ulimit(plan.open_files_per_worker)


def validate(
    out: Annotated[str, typer.Argument(help="output folder of a run")],
    subset: Annotated[
        list[str] | None, typer.Option("--subset", help="only this subset (repeatable)")
    ] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", min=1, help="read only the first N samples of each split")
    ] = None,
    workers: Annotated[int, typer.Option(min=0, help="loader worker processes (0: in-process)")] = 0,
    checksums: Annotated[
        bool | None,
        typer.Option("--checksums/--no-checksums", help="re-hash every tar (default: when reading all)"),
    ] = None,
) -> None:
    """Load every dataset back through megatron-energon and the cooker; compare with the manifests.

    Exits 1 with a report naming each mismatch."""
    from ...tasks.validate import format_reports, validate_output

    reports = validate_output(
        out, subset or None, sample_limit=sample, num_workers=workers, checksums=checksums
    )
    typer.echo(format_reports(reports))
    if not all(report.ok for report in reports):
        raise typer.Exit(1)


def _warn_ulimit(needed: int) -> None:
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return
    if soft != resource.RLIM_INFINITY and needed > soft // 2:
        typer.echo(
            f"note: `ulimit -n` is {soft} here; a loader worker may keep {needed} files open for this blend "
            "besides its own (raise the limit on the training machines or lower --max-open-files)",
            err=True,
        )
