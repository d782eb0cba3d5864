"""CLI commands ``catalog`` and ``refresh`` (registered on the main app by ``flows/cli/__init__.py``).

``catalog`` prints what a release holds (subsets, hashes, rows, licenses, upstream media sources, revision)
without fetching media; ``refresh`` compares that catalog with an output folder's last run and reruns only
the subsets whose README, license, JSONL or media recipe changed, unpublishing the ones gone upstream.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ...schemas.config import RECIPE_OPTIONS
from ...tasks.estimate import (
    DEFAULT_BANDWIDTH_TEXT,
    DEFAULT_DECODE_SAMPLE,
    DEFAULT_PROBE_SAMPLE,
    estimate_fields,
)
from ..narrow_tables import print_whole
from .options import TrainerOption, config_options, with_config_options, with_trainer

__all__ = ["register"]

# refresh's options shared with run: the recipe options, which subsets (by license) and where reruns run
REFRESH_OPTIONS = (*RECIPE_OPTIONS, "license_allow", "executor")

console = Console()
err = Console(stderr=True)

CATALOG_EXAMPLES = """
Examples:

  vlmforge catalog ./Nemotron-Image-Training-v3

  vlmforge catalog hf://datasets/nvidia/Nemotron-Image-Training-v3@<revision> --subset docvqa

  vlmforge catalog s3://bucket/releases/v3 --storage-option endpoint_url=http://127.0.0.1:9000 --json

  vlmforge catalog ./release --estimate --out ./out --trainer bridge-qwen3-vl --cores 64 --bandwidth 10Gbit
"""

REFRESH_EXAMPLES = """
Examples:

  vlmforge refresh hf://datasets/nvidia/Nemotron-Image-Training-v3@<new revision> --out ./out --dry-run

  vlmforge refresh ./release --out ./out --license-allow CC-BY-4.0,CC-BY-SA-4.0,Apache-2.0
"""

StorageOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--storage-option",
        help="fsspec storage option key=value for the release (repeatable; JSON values, dotted keys nest)",
    ),
]


def _catalog(
    release: str,
    subsets: list[str] | None,
    storage_option: list[str] | None,
    recipes: list[str] | None,
) -> list[Any]:
    from ...tasks.catalog import catalog_release, parse_storage_options

    return catalog_release(
        release,
        subsets=tuple(subsets or ()),
        storage_options=parse_storage_options(storage_option),
        recipe_dirs=recipes or (),
    )


def _sources(sources: tuple[str, ...], at_most: int = 3) -> str:
    shown = list(sources[:at_most])
    if len(sources) > at_most:
        shown.append(f"(+{len(sources) - at_most} more)")
    return "\n".join(shown)


def register(app: typer.Typer) -> None:
    @app.command("catalog", epilog=CATALOG_EXAMPLES)
    @config_options(only=estimate_fields())
    def catalog(
        ctx: typer.Context,
        release: Annotated[str, typer.Argument(help="release folder or fsspec URL (hf://, s3://, file://)")],
        as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
        estimate: Annotated[
            bool,
            typer.Option(
                "--estimate", help="objects, bytes, disk and hours of a run per subset, without media bodies"
            ),
        ] = False,
        out: Annotated[
            str | None, typer.Option("--out", "-o", help="--estimate: output folder (store, runs, table)")
        ] = None,
        trainer: TrainerOption = None,
        cores: Annotated[int, typer.Option(help="--estimate: cores of the run (0: this machine's)")] = 0,
        bandwidth: Annotated[
            str, typer.Option(help="--estimate: network, e.g. 1Gbit, 200Mbit, 50MB")
        ] = DEFAULT_BANDWIDTH_TEXT,
        probe_sample: Annotated[
            int, typer.Option(help="--estimate: objects per source sized by HEAD where no index says it")
        ] = DEFAULT_PROBE_SAMPLE,
        decode_sample: Annotated[
            int, typer.Option(help="--estimate: objects per subset normalised for the disk ratios (0: none)")
        ] = DEFAULT_DECODE_SAMPLE,
        seed: Annotated[int, typer.Option(help="--estimate: seed of the samples")] = 0,
        **options: Any,
    ) -> None:
        """List a release's subsets: hashes, rows, license, upstream media sources, revision (no media).
        With --estimate: what a run will fetch, store and take, per subset (the run's options, as for run)."""
        given = with_config_options(options)
        if estimate:
            from .estimate import print_estimate, run_estimate

            result = run_estimate(
                release=release,
                out=out,
                options=with_trainer(ctx, trainer, given),
                probe_sample=probe_sample,
                decode_sample=decode_sample,
                seed=seed,
                cores=cores,
                bandwidth=bandwidth,
            )
            print_estimate(release, result, as_json)
            return
        entries = _catalog(release, given.get("subsets"), given.get("storage_options"), given.get("catalogs"))
        if as_json:
            rows = [
                {
                    "subset": e.subset,
                    "readme_sha256": e.readme_sha256,
                    "jsonl_sha256": e.jsonl_sha256,
                    "jsonl_bytes": e.jsonl_bytes,
                    "rows": e.rows,
                    "license": e.license,
                    "license_text": e.license_text,
                    "media_tars": len(e.media_tars),
                    "media_sources": list(e.media_sources),
                    "media_recipe_sha256": e.media_recipe_sha256,
                    "duplicate_rows": len(e.duplicate_rows),
                    "id_conflicts": len(e.id_conflicts),
                    "revision": e.revision,
                }
                for e in entries
            ]
            typer.echo(json.dumps(rows, indent=1))
            return
        revision = entries[0].revision if entries else None
        t = Table(title=f"{release} (revision {revision or 'not pinned'}): {len(entries)} subsets")
        for col, justify in (
            ("subset", "left"),
            ("rows", "right"),
            ("JSONL", "right"),
            ("license", "left"),
            ("README sha256", "left"),
            ("JSONL sha256", "left"),
            ("tars", "right"),
            ("dups", "right"),
            ("id conflicts", "right"),
            ("media sources", "left"),
        ):
            t.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for e in entries:
            lic = e.license if e.license != "unknown" else f"unknown: {(e.license_text or '')[:60]}"
            t.add_row(
                e.subset,
                f"{e.rows:,}",
                f"{e.jsonl_bytes / 1e6:,.1f} MB",
                lic,
                (e.readme_sha256 or "-")[:12],
                e.jsonl_sha256[:12],
                str(len(e.media_tars)),
                str(len(e.duplicate_rows)),
                str(len(e.id_conflicts)),
                _sources(e.media_sources),
            )
        print_whole(console, t)

    @app.command("refresh", epilog=REFRESH_EXAMPLES)
    @config_options(only=REFRESH_OPTIONS)
    def refresh(
        release: Annotated[str, typer.Argument(help="release folder or fsspec URL (the new upstream)")],
        out: Annotated[str, typer.Option("--out", "-o", help="output folder of the earlier run")],
        retry_unpublished: Annotated[
            bool, typer.Option(help="also rerun subsets whose last run was held back")
        ] = False,
        dry_run: Annotated[bool, typer.Option(help="print what would change, do nothing")] = False,
        **options: Any,
    ) -> None:
        """Rerun only subsets whose README, license, JSONL or media recipe changed; unpublish removed ones.
        The reruns take the last run's options; the recipe options and --executor given here replace its."""
        from ...tasks.catalog import parse_license_allow

        given = with_config_options(options)
        allow = parse_license_allow(given.pop("license_allow", None))
        executor = given.pop("executor")
        storage_option, recipes = given.pop("storage_options", None), given.get("catalogs")
        if dry_run:  # the plan only: no Prefect, no Ray
            from ..ops import plan_release_refresh

            entries = _catalog(release, None, storage_option, recipes)
            _print_plan(
                release, out, plan_release_refresh(entries, out, allow, retry_unpublished=retry_unpublished)
            )
            return
        overrides = {k: tuple(v) for k, v in given.items()} | {"executor": executor}
        _apply(release, out, storage_option, recipes, allow, retry_unpublished, overrides)


def _print_plan(release: str, out: str, plan: Any) -> None:
    t = Table(title=f"refresh {out} from {release}")
    for col in ("subset", "action", "why"):
        t.add_column(col, overflow="fold")
    colour = {"rerun": "yellow", "unpublish": "red", "unchanged": "green"}
    for c in sorted(plan.changes, key=lambda c: c.subset):
        t.add_row(c.subset, f"[{colour[c.action]}]{c.action}", "; ".join(c.reasons) or "no upstream change")
    print_whole(console, t)


def _apply(
    release: str,
    out: str,
    storage_option: list[str] | None,
    recipes: list[str] | None,
    allow: list[str],
    retry_unpublished: bool,
    overrides: dict[str, Any],
) -> None:
    """Run the ``refresh_release`` flow: catalog, plan, unpublish, rerun the changed subsets, metadataset."""
    from ...schemas.config import StorageOptions
    from ...tasks.catalog import parse_storage_options
    from ..ops import refresh_release
    from ..runtime.embedded import embedded_runtime
    from ..runtime.interrupt import cancels_flow_run, stops_cleanly
    from ..runtime.run_lock import run_lock

    options = parse_storage_options(storage_option)
    with stops_cleanly("refresh"), run_lock(out), embedded_runtime(), cancels_flow_run():
        result = refresh_release(
            release,
            out,
            storage_options=StorageOptions(options=options) if options else None,
            recipes=list(recipes or ()),
            license_allow=allow,
            retry_unpublished=retry_unpublished,
            overrides=overrides,
        )
    _print_plan(release, out, result.plan)
    if result.summary is not None:
        from ..summary import print_summary

        print_summary(result.summary)
    if result.failed:
        err.print(f"[red]not published:[/red] {', '.join(result.failed)}")
        raise typer.Exit(1)
