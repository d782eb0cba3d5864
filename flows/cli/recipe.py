"""``vlmforge recipe ...``: draft, check and list media recipes (registered by ``flows/cli/__init__.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .options import config_options, with_config_options

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
    from ...tasks.catalog import draft_recipe
    from ...tasks.errors import OutputError
    from ...tasks.storage import atomic_write_text

    draft = draft_recipe(release, subset)
    if out is None:
        typer.echo(draft.text, nl=False)
        return
    if out.exists() and not force:
        raise OutputError(f"{out} exists; pass --force to overwrite it")
    atomic_write_text(out.resolve(), draft.text)
    typer.echo(f"drafted {out} ({len(draft.urls)} README URLs, {len(draft.sample_refs)} sample references)")


def _needs(recipe: object, allow: list[str] | None) -> str:
    """What the recipe's variables need here: allowed and set, or why not."""
    from ...tasks.fetch import recipe_variables, variable_problems

    names = recipe_variables(recipe)  # type: ignore[arg-type]
    if not names:
        return ""
    problems = variable_problems(recipe, allow or ())  # type: ignore[arg-type]
    return f"; reads {', '.join('${' + n + '}' for n in names)}: " + (
        "; ".join(problems) or "allowed and set"
    )


@recipe_app.command("check")
@config_options(only=("env_allow",))
def check(paths: Annotated[list[Path], typer.Argument(help="recipe files")], **options: Any) -> None:
    """Validate recipe files; each error names the file, the field path and the value. Says which
    environment variables a recipe reads and whether --env-allow and the environment let it."""
    from ...tasks.catalog import load_recipe

    allow = with_config_options(options).get("env_allow")
    for p in paths:
        r = load_recipe(p)
        sources = ", ".join(s.kind for s in r.sources)
        typer.echo(f"{p}: ok ({r.status}, {r.license}, sources: {sources}){_needs(r, allow)}")


@recipe_app.command("list")
@config_options(only=("catalogs", "env_allow"))
def list_recipes(
    catalog: Annotated[
        list[Path] | None, typer.Option("--catalog", hidden=True)
    ] = None,  # --recipes' old name
    **options: Any,
) -> None:
    """The recipes vlmforge would use, per subset (the first of --recipes, then the shipped ones), with
    their license and sources, and the environment variables they read."""
    from ...tasks.catalog import builtin_catalog_dir, load_recipe

    given = with_config_options(options)
    folders = [*(Path(f) for f in given.get("catalogs") or ()), *(catalog or ())]
    seen: set[str] = set()
    for folder in [*folders, builtin_catalog_dir()]:
        for p in sorted(folder.glob("*.yaml")):
            if p.stem in seen:
                continue
            seen.add(p.stem)
            r = load_recipe(p)
            sources = " > ".join(s.kind for s in r.sources)
            typer.echo(
                f"{r.subset:24} {r.status:6} {r.license:38} {sources}{_needs(r, given.get('env_allow'))}"
            )


def register(app: typer.Typer) -> None:
    """Add the ``recipe`` command group to the main CLI."""
    app.add_typer(recipe_app, name="recipe")
