"""Find and read media recipes: the YAML files under a catalog folder (``--catalog``, then the recipes
shipped with vlmforge), validated by ``schemas/recipes.py`` with errors that name the file, the field path
and the value."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...schemas.recipes import Recipe, parse_recipe
from ...schemas.safe_yaml import MAX_BYTES, YamlLimitError, bounded_repr, load_limited
from ..errors import VlmforgeError


class RecipeError(VlmforgeError):
    """A recipe cannot be used: invalid YAML or fields (with their location), or still a draft."""


def builtin_catalog_dir() -> Path:
    """The recipes shipped with vlmforge (``recipes/*.yaml``)."""
    try:
        from importlib.resources import files

        path = Path(str(files("vlmforge.recipes")))
        if path.is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "recipes"


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate one recipe file; errors name the file, the field path and the value.

    The YAML is read with limits (no aliases, a node budget, depth and size caps: ``schemas/safe_yaml.py``)
    and every quoted value is cut while it is built, so a hostile recipe is refused in bounded time and
    memory."""
    import yaml
    from pydantic import ValidationError

    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        data = load_limited(raw.decode("utf-8"))
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RecipeError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except YamlLimitError as exc:
        raise RecipeError(f"{p}: refused: {exc}") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{p}: not valid YAML: {str(exc)[:600]}") from None
    try:
        recipe = parse_recipe(data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"])
            value = bounded_repr(e.get("input"), 80)
            problems.append(f"{loc[:200] or '(top)'}: {bounded_repr(e['msg'], 300)} (got {value})")
            if len(problems) >= 20:
                problems.append(f"... and {len(exc.errors()) - 20} more")
                break
        raise RecipeError(f"{p}: invalid recipe:\n  " + "\n  ".join(problems)) from None
    if recipe.subset != p.stem:
        raise RecipeError(
            f"{p}: subset is {recipe.subset!r} but the file is named {p.name} (name it {recipe.subset}.yaml)"
        )
    return recipe


def find_recipe(subset: str, catalogs: Sequence[str | Path] = ()) -> Recipe | None:
    """The recipe of ``subset`` from the first catalog folder holding ``<subset>.yaml`` (the given folders,
    then the shipped catalog), or None."""
    for folder in [*map(Path, catalogs), builtin_catalog_dir()]:
        path = folder / f"{subset}.yaml"
        if path.is_file():
            return load_recipe(path)
    return None


def recipe_for(subset: str, catalogs: Sequence[str | Path] = ()) -> Recipe:
    """The subset's recipe, or the default one (media roots, then the release's own media)."""
    return find_recipe(subset, catalogs) or Recipe.default(subset)


def check_ready(recipe: Recipe, allow_draft: bool = False) -> None:
    """Refuse a draft recipe (written by ``vlmforge recipe init``) until a person has reviewed it."""
    if recipe.status == "draft" and not allow_draft:
        raise RecipeError(
            f"the recipe of {recipe.subset} is a draft: review its sources and license, "
            "then set `status: ready`"
        )
