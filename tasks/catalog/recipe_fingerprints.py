"""Fingerprints of media recipes, recorded per subset so a refresh reruns a subset whose recipe changed."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson


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
