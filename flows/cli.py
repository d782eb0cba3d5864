"""The ``vlmforge`` command line: thin wrappers over the flows and tasks.

Only the project's own errors (``VlmforgeError``) become one-line messages; anything else is a bug and keeps
its traceback (set ``VLMFORGE_DEBUG=1`` to see tracebacks for our errors too).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..tasks.errors import ConfigError, VlmforgeError
from .runtime import apply_quiet_env

apply_quiet_env()

app = typer.Typer(
    name="vlmforge",
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
def run(
    ctx: typer.Context,
    release: Annotated[str, typer.Argument(help="release folder or fsspec URL (one folder per subset)")],
    out: Annotated[str, typer.Option("--out", "-o", help="output folder")],
    source_format: Annotated[
        str,
        typer.Option(
            "--format", help="layout of RELEASE: nemotron | mantis | infovqa | llava_video (staged first)"
        ),
    ] = "nemotron",
    config: Annotated[
        list[str] | None,
        typer.Option("--config", help="only this config of a --format source (repeatable; default: all)"),
    ] = None,
    subset: Annotated[
        list[str] | None, typer.Option("--subset", help="only this subset (repeatable)")
    ] = None,
    media_root: Annotated[
        list[str] | None, typer.Option("--media-root", help="folder searched first for media (repeatable)")
    ] = None,
    storage_option: Annotated[
        list[str] | None,
        typer.Option("--storage-option", help="fsspec option of the release, key=value (repeatable)"),
    ] = None,
    license_allow: Annotated[
        list[str] | None,
        typer.Option(help="only subsets under these licenses (SPDX ids or patterns, comma-separated)"),
    ] = None,
    allow_url_scheme: Annotated[
        list[str] | None,
        typer.Option("--allow-url-scheme", help="media references may be URLs of this scheme (repeatable)"),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="content-addressed media store, any fsspec URL (default OUT/store)")
    ] = None,
    recipes: Annotated[
        list[str] | None,
        typer.Option("--recipes", help="folder of <subset>.yaml media recipes, before catalog/ (repeatable)"),
    ] = None,
    env_allow: Annotated[
        list[str] | None,
        typer.Option(
            "--env-allow",
            help="environment variable a recipe may read as ${NAME} (repeatable; its value is masked)",
        ),
    ] = None,
    fetch_concurrency: Annotated[int, typer.Option(help="fetch threads per batch")] = 16,
    fetch_per_host: Annotated[
        int,
        typer.Option(
            help="requests in flight per upstream host across the run (the batches fetching at once split "
            "it; each keeps at least 1)"
        ),
    ] = 32,
    fetch_batch_timeout: Annotated[
        float, typer.Option(help="seconds one batch may spend fetching; what is unfinished ends as timeout")
    ] = 3600.0,
    fetch_request_timeout: Annotated[
        float,
        typer.Option(help="seconds one HTTP request may take: connect, headers, redirects and body together"),
    ] = 300.0,
    trainer: Annotated[
        str | None,
        typer.Option(
            help="set --model and the knobs to what this trainer's data path does (bridge-qwen2.5-vl | "
            "bridge-qwen3-vl; table in README); options given explicitly override the trainer's values"
        ),
    ] = None,
    model: Annotated[str, typer.Option(help="model preset for token counts and resize")] = "qwen2_5_vl",
    model_dir: Annotated[
        str | None, typer.Option(help="local model folder: its preprocessor_config.json overrides the preset")
    ] = None,
    tokenizer: Annotated[str | None, typer.Option(help="tokenizer.json or model folder")] = None,
    max_pixels: Annotated[int | None, typer.Option(help="resize images above this many pixels")] = None,
    min_pixels: Annotated[int | None, typer.Option(help="model min pixels (default: preset)")] = None,
    max_num_images: Annotated[int | None, typer.Option(help="drop samples with more images")] = None,
    max_num_frames: Annotated[int | None, typer.Option(help="cap sampled frames per video")] = None,
    frames_mode: Annotated[str, typer.Option(help="uniform | truncate (over --max-num-frames)")] = "uniform",
    max_visual_tokens: Annotated[
        int | None, typer.Option(help="drop samples with more visual tokens")
    ] = None,
    seq_len: Annotated[int | None, typer.Option(help="drop samples longer than this")] = None,
    seq_len_mode: Annotated[
        str, typer.Option(help="drop | truncate (cut text after the last visual token, keep a target)")
    ] = "drop",
    min_image_side: Annotated[int, typer.Option(help="reject images with a shorter side (too_small)")] = 1,
    video_mode: Annotated[
        str, typer.Option(help="keep (video bytes, decoded in training) | frames (sampled frames as images)")
    ] = "keep",
    video_max_pixels: Annotated[
        int | None, typer.Option(help="--video-mode frames: cap on each frame's pixels")
    ] = None,
    max_image_pixels: Annotated[
        int, typer.Option(help="decompression-bomb limit, checked from the header")
    ] = 256_000_000,
    image_format: Annotated[str, typer.Option(help="keep | jpeg | webp | png")] = "keep",
    accept_image_format: Annotated[
        list[str] | None,
        typer.Option(
            "--accept-image-format",
            help="also accept images in this Pillow format (XPM, FITS, ...; repeatable; list in README)",
        ),
    ] = None,
    val_fraction: Annotated[float, typer.Option(help="share of samples in the val split")] = 0.0,
    max_reject_rate: Annotated[float, typer.Option(help="gate: highest reject rate a subset may have")] = 0.5,
    skip_gate: Annotated[bool, typer.Option(help="publish without the quality gate (debugging)")] = False,
    gate_overrides: Annotated[
        str | None, typer.Option(help="JSON file of per-subset gate parameters")
    ] = None,
    shard_size: Annotated[str, typer.Option(help="target bytes per shard (1GB, 500MB, ...)")] = "1GB",
    shard_max_samples: Annotated[int, typer.Option(help="samples per shard at most")] = 10_000,
    sample_format: Annotated[
        str,
        typer.Option(
            help="bridge (Megatron-Bridge's ChatMLWebdataset: images and sampled frames, pickled) | crude "
            "(CrudeWebdataset + vlmforge's cooker: media parts as stored, video bytes with frame_indices)"
        ),
    ] = "bridge",
    batch_lines: Annotated[
        int, typer.Option(help="JSONL lines per batch at most (the unit of work; media cap it sooner)")
    ] = 10_000,
    ray_address: Annotated[str | None, typer.Option(help="existing Ray cluster (default: local)")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs for the local Ray")] = None,
) -> None:
    """Catalog, parse, verify media, count tokens, gate and write Energon shards."""
    from ..schemas.config import RunConfig
    from ..tasks.catalog.refresh import parse_license_allow
    from ..tasks.catalog.storage_options import parse_storage_options
    from ..tasks.media.formats import accepted_image_formats
    from ..tasks.publish.rolling import parse_size

    try:
        options = dict(
            release=release,
            out=out,
            source_format=source_format,
            source_configs=tuple(config or ()),
            subsets=tuple(subset or ()),
            media_roots=tuple(media_root or ()),
            storage_options=parse_storage_options(storage_option),
            license_allow=tuple(parse_license_allow(license_allow)),
            allowed_url_schemes=tuple(allow_url_scheme or ()),
            store=store,
            catalogs=tuple(recipes or ()),
            env_allow=tuple(env_allow or ()),
            fetch_concurrency=fetch_concurrency,
            fetch_per_host=fetch_per_host,
            fetch_batch_timeout=fetch_batch_timeout,
            fetch_request_timeout=fetch_request_timeout,
            model=model,
            model_dir=model_dir,
            tokenizer=tokenizer,
            max_pixels=max_pixels,
            min_pixels=min_pixels,
            max_num_images=max_num_images,
            max_num_frames=max_num_frames,
            frames_mode=frames_mode,
            max_visual_tokens=max_visual_tokens,
            seq_len=seq_len,
            seq_len_mode=seq_len_mode,
            min_image_side=min_image_side,
            video_mode=video_mode,
            video_max_pixels=video_max_pixels,
            max_image_pixels=max_image_pixels,
            image_format=image_format,
            extra_image_formats=tuple(accept_image_format or ()),
            val_fraction=val_fraction,
            max_reject_rate=max_reject_rate,
            skip_gate=skip_gate,
            gate_overrides=gate_overrides,
            shard_max_bytes=parse_size(shard_size),
            shard_max_samples=shard_max_samples,
            sample_format=sample_format,
            batch_lines=batch_lines,
            ray_address=ray_address,
            num_cpus=num_cpus,
        )
        cfg = RunConfig.of(**_with_trainer(ctx, trainer, options))
        accepted_image_formats(cfg.media.extra_image_formats)  # an unknown format name fails here
    except Exception as exc:  # pydantic ValidationError: say which option and why
        raise typer.BadParameter(str(exc)) from None
    from ..schemas.presets import load_preset
    from .runtime import LoopbackRayTaskRunner, embedded_runtime

    load_preset(cfg.tokens.model, cfg.tokens.model_dir)  # an unknown model fails before any service starts
    from .progress import terminal_progress
    from .summary import print_summary

    for name in ("prefect.flow_runs", "prefect.task_runs"):
        logging.getLogger(name).addFilter(_OwnErrorsWithoutTraceback())
    runner = LoopbackRayTaskRunner(address=cfg.execution.ray_address, num_cpus=cfg.execution.num_cpus)
    # The flow's imports and Ray's start run while the Prefect server boots.
    with embedded_runtime(runner, while_booting=_import_flow), terminal_progress():
        from .pipeline import run_release

        summary = run_release.with_options(task_runner=runner)(cfg)
    print_summary(summary)
    if summary.failed:
        err.print(f"[red]not published:[/red] {', '.join(summary.failed)} (see the gate column above)")
    if summary.unreadable:
        err.print(
            f"[red]read back wrong:[/red] {', '.join(summary.unreadable)} (see the validation column above; "
            "`vlmforge validate OUT` reads every sample)"
        )
    if summary.failed or summary.unreadable:
        raise typer.Exit(1)


def _import_flow() -> None:
    from . import pipeline  # noqa: F401 - imported while the services start


def _with_trainer(ctx: typer.Context, trainer: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the ``--trainer`` preset's values for every option not given on the command line
    (or through an environment variable): an explicit flag overrides the trainer."""
    from ..schemas.trainers import TRAINERS

    if trainer is None:
        return options
    if trainer not in TRAINERS:
        known = ", ".join(TRAINERS)
        raise typer.BadParameter(f"unknown trainer {trainer!r}; known: {known}", param_hint="--trainer")
    preset = TRAINERS[trainer]
    # typer vendors click: compare the ParameterSource member by name, not by class
    unset = {k for k in preset if getattr(ctx.get_parameter_source(k), "name", "DEFAULT") == "DEFAULT"}
    return options | {k: v for k, v in preset.items() if k in unset}


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
    sql: Annotated[str, typer.Argument(help="SQL over the views samples, media, subsets, shards")],
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
    from ..tasks.ops.query import FORMAT_NAMES, render, run_query, text_rows

    if fmt not in FORMAT_NAMES:
        raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMAT_NAMES)}")
    table = run_query(out, sql, allow_external_access=allow_external_access)
    if fmt == "table":
        t = Table()
        for name in table.column_names:
            t.add_column(name, overflow="fold")
        for row in text_rows(table):
            t.add_row(*row)
        console.print(t)
    elif fmt == "json":
        console.print_json(render(table, fmt))
    else:
        sys.stdout.write(render(table, fmt))
        sys.stdout.flush()


@app.command("sample-release")
def sample_release(
    dest: Annotated[Path, typer.Argument(help="folder to create")],
    overwrite: Annotated[bool, typer.Option(help="replace dest if it exists")] = False,
) -> None:
    """Build the small sample release (real photos and a real video from scikit-image, plus bad input)."""
    from ..tasks.ops.sample_release.build import build_sample_release

    rel = build_sample_release(dest, overwrite=overwrite)
    console.print(f"sample release: {rel.root} ({len(rel.subsets)} subsets, {rel.total_lines} lines)")


def _register_commands() -> None:
    # One module per command family keeps this file about `run`; each adds its commands to `app`.
    from . import cli_catalog, cli_energon, cli_quality, cli_recipe, cli_server, cli_tokens

    for module in (cli_catalog, cli_recipe, cli_tokens, cli_energon, cli_quality, cli_server):
        module.register(app)


_register_commands()


def main() -> None:
    try:
        app()
    except VlmforgeError as exc:
        if os.environ.get("VLMFORGE_DEBUG"):
            raise
        err.print(f"[red]error:[/red] {exc}\n(set VLMFORGE_DEBUG=1 for the traceback)", soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
