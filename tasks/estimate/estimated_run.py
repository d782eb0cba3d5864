"""The run an estimate is of: its config from the options a person or a deployment names by flat names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...schemas.config import RECIPE_OPTIONS, RunConfig

# What an estimate reads of a run: the release and its subsets, where media is stored and how it is fetched
# per host, the recipe options (the variables a recipe may read among them), and every media and token knob
# (they decide stored sizes and visual tokens). Anything else a caller passes (a gate bound, a batch size)
# does not change the estimate and is left out.
_RUN_FIELDS = frozenset(
    {"subsets", "storage_options", "store", "fetch_per_host", "fetch_concurrency", *RECIPE_OPTIONS}
)


def estimate_fields() -> frozenset[str]:
    """The run options an estimate reads (``catalog --estimate`` takes them as ``run`` does)."""
    keys = set(_RUN_FIELDS)
    for section in ("tokens", "media"):
        keys |= set(RunConfig.model_fields[section].annotation.model_fields)  # type: ignore[union-attr]
    return frozenset(keys)


def estimate_config(release: str, out: str | None, options: Mapping[str, Any]) -> RunConfig:
    """The config of the run being estimated: ``release`` into ``out`` (``.`` when none) with ``options``."""
    keys = estimate_fields()
    chosen = {k: v for k, v in options.items() if k in keys}
    return RunConfig.of(out=out or ".", **chosen | {"release": release})
