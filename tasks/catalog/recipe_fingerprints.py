"""Fingerprints of media recipes, recorded per subset so a refresh reruns a subset whose recipe changed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

from .recipe_files import find_recipe


def recipe_fingerprint(recipe: Any) -> str:
    """sha256 of a media recipe's canonical JSON (a pydantic model, a mapping, or its YAML/JSON text)."""
    if hasattr(recipe, "model_dump"):
        recipe = recipe.model_dump(mode="json")
    if isinstance(recipe, str | bytes):
        data = recipe.encode() if isinstance(recipe, str) else recipe
    else:
        data = orjson.dumps(recipe, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()


def recipe_fingerprints_from_dir(folder: str, subsets: Iterable[str]) -> dict[str, str]:
    """sha256 of each ``<folder>/<subset>.yaml`` that exists (the recipe's text, as written)."""
    out: dict[str, str] = {}
    for name in subsets:
        p = Path(folder) / f"{name}.yaml"
        if p.is_file():
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def recipe_fingerprints_of(subsets: Iterable[str], recipe_dirs: Sequence[str | Path]) -> dict[str, str]:
    """:func:`recipe_fingerprint` of each subset's media recipe (the first of ``recipe_dirs``, then the
    shipped recipes, that has one); subsets without a recipe are left out."""
    found = {s: find_recipe(s, recipe_dirs) for s in subsets}
    return {s: recipe_fingerprint(r) for s, r in found.items() if r is not None}
