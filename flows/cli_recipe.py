"""``vlmforge recipe ...``: draft, check and list media recipes (registered by ``flows/cli.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RECIPE_EXAMPLES = """
Examples:

  vlmforge recipe init chartqa_1 --release ./Nemotron-Image-Training-v3 --out recipes/chartqa_1.yaml

  vlmforge recipe check recipes/chartqa_1.yaml

  vlmforge recipe list
"""

recipe_app = typer.Typer(
    name="recipe",
    help="Media recipes: where each subset's referenced media come from (recipes/*.yaml).",
    no_args_is_help=True,
    epilog=RECIPE_EXAMPLES,
)


@recipe_app.command("init", epilog=RECIPE_EXAMPLES)
def init(
    subset: Annotated[str, typer.Argument(help="subset folder name in the release")],
    release: Annotated[str, typer.Option("--release", "-r", help="release folder or fsspec URL")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="write here (default: print)")] = None,
    force: Annotated[bool, typer.Option(help="overwrite an existing file")] = False,
) -> None:
    """Draft SUBSET's recipe from its README's URLs (status: draft, for a person to review)."""
    from ..tasks.catalog import draft_recipe
    from ..tasks.errors import OutputError
    from ..tasks.storage import atomic_write_text

    draft = draft_recipe(release, subset)
    if out is None:
        typer.echo(draft.text, nl=False)
        return
    if out.exists() and not force:
        raise OutputError(f"{out} exists; pass --force to overwrite it")
    atomic_write_text(out.resolve(), draft.text)
    typer.echo(f"drafted {out} ({len(draft.urls)} README URLs, {len(draft.sample_refs)} sample references)")


@recipe_app.command("check")
def check(paths: Annotated[list[Path], typer.Argument(help="recipe files")]) -> None:
    """Validate recipe files; each error names the file, the field path and the value."""
    from ..tasks.catalog import load_recipe

    for p in paths:
        r = load_recipe(p)
        typer.echo(f"{p}: ok ({r.status}, {r.license}, sources: {', '.join(s.kind for s in r.sources)})")


@recipe_app.command("list")
def list_recipes(
    catalog: Annotated[
        list[Path] | None, typer.Option("--catalog", help="extra recipe folder (first wins)")
    ] = None,
) -> None:
    """The recipes vlmforge would use, per subset, with their license and sources."""
    from ..tasks.catalog import builtin_catalog_dir, load_recipe

    seen: set[str] = set()
    for folder in [*(catalog or []), builtin_catalog_dir()]:
        for p in sorted(folder.glob("*.yaml")):
            if p.stem in seen:
                continue
            seen.add(p.stem)
            r = load_recipe(p)
            typer.echo(f"{r.subset:24} {r.status:6} {r.license:38} {' > '.join(s.kind for s in r.sources)}")


def register(app: typer.Typer) -> None:
    """Add the ``recipe`` command group to the main CLI."""
    app.add_typer(recipe_app, name="recipe")
