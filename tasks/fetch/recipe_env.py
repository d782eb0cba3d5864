"""Environment values put into a recipe, only where its schema allows them and only for variables the user
allowed (``vlmforge run --env-allow NAME``), once per fetch batch.

Why an allow-list: whoever writes a recipe is not whoever runs it. Without one, a recipe could name any
variable of the worker (``AWS_SECRET_ACCESS_KEY``) and send it to any host in a URL. The schema already
confines ``${NAME}`` to the start of a location (``local`` root, ``http_files``/``archive`` url) and to whole
``storage_options`` values (``schemas/recipes.py``); here a variable is expanded only when the user named it,
and every expanded value is registered as a secret (``schemas/redact.register_secret``), so the upstream and
fetch_detail columns, the store's upstream records, failure details and log lines show ``${NAME}`` instead
of the value. A variable left unexpanded (unset or not allowed) makes its source answer ``source_error``
with the reason (``schemas.recipes.expand_env``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ...schemas.recipes import Recipe
from ...schemas.redact import register_secret

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def bind_environment(
    recipe: Recipe, allow: Iterable[str], environ: Mapping[str, str] | None = None
) -> Recipe:
    """``recipe`` with the allowed ``${NAME}`` parts of its sources replaced by their values (registered as
    secrets); everything else unchanged. Without ``${`` anywhere, the recipe itself."""
    allowed = frozenset(allow)
    env = os.environ if environ is None else environ
    sources = []
    changed = False
    for source in recipe.sources:
        updates: dict[str, Any] = {}
        for field in source.env_locations:
            value = getattr(source, field, None)
            if isinstance(value, str) and "${" in value:
                updates[field] = _expand(value, allowed, env, template=True)
        headers = getattr(source, "headers", None)
        if headers:
            expanded_headers = {k: _expand(v, allowed, env, template=False) for k, v in headers.items()}
            if expanded_headers != headers:
                updates["headers"] = expanded_headers
        options = getattr(source, "storage_options", None)
        if options:
            expanded = _expand_options(options, allowed, env)
            if expanded != options:
                updates["storage_options"] = expanded
        if updates:
            changed = True
            source = source.model_copy(update=updates)  # no re-validation: values are not templates
        sources.append(source)
    return recipe.model_copy(update={"sources": sources}) if changed else recipe


def _expand(text: str, allowed: frozenset[str], env: Mapping[str, str], *, template: bool) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        value = env.get(name) if name in allowed else None
        if value is None:
            return m.group(0)  # left for expand_env to refuse with its reason
        register_secret(value, f"${{{name}}}")
        # inside a template, braces of the value are text, not variables
        return value.replace("{", "{{").replace("}", "}}") if template else value

    return _ENV_RE.sub(one, text)


def _expand_options(options: Any, allowed: frozenset[str], env: Mapping[str, str]) -> Any:
    if isinstance(options, str):
        return _expand(options, allowed, env, template=False) if _ENV_RE.fullmatch(options) else options
    if isinstance(options, dict):
        return {k: _expand_options(v, allowed, env) for k, v in options.items()}
    if isinstance(options, list):
        return [_expand_options(v, allowed, env) for v in options]
    return options


def recipe_variables(recipe: Recipe) -> list[str]:
    """The ``${NAME}`` variables ``recipe``'s sources read (locations, headers, storage options), in order."""
    names: list[str] = []

    def scan(value: Any) -> None:
        if isinstance(value, str):
            names.extend(n for n in _ENV_RE.findall(value) if n not in names)
        elif isinstance(value, dict):
            for v in value.values():
                scan(v)
        elif isinstance(value, list):
            for v in value:
                scan(v)

    for source in recipe.sources:
        for field in source.env_locations:
            scan(getattr(source, field, None))
        scan(getattr(source, "headers", None))
        scan(getattr(source, "storage_options", None))
    return names


def variable_problems(
    recipe: Recipe, allow: Iterable[str], environ: Mapping[str, str] | None = None
) -> list[str]:
    """Why ``recipe`` cannot read each of its variables here (not allowed, or unset), with what to do."""
    allowed, env = frozenset(allow), os.environ if environ is None else environ
    problems = []
    for name in recipe_variables(recipe):
        if name not in allowed:
            problems.append(f"${{{name}}} not allowed (pass --env-allow {name})")
        elif name not in env:
            problems.append(f"${{{name}}} is not set")
    return problems
