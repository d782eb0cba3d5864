"""Why a recipe field's value is refused: its template variables, where an environment variable may stand
(``${NAME}``, only as a mirror location's start or a whole secret value), its request headers and its fsspec
``storage_options``. The models of ``recipes.py`` call these in their validators."""

from __future__ import annotations

import re
import string
from typing import Any

ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def template_fields(template: str) -> list[str]:
    """Variable names used by ``template`` (``${ENV}`` parts excluded); raises ValueError if malformed."""
    text = ENV_RE.sub("", template)
    names = []
    for _, field, spec, conv in string.Formatter().parse(text):
        if field is None:
            continue
        if not field.isidentifier() or spec or conv:
            raise ValueError(
                f"template {template!r}: '{{{field}{'!' + conv if conv else ''}"
                f"{':' + spec if spec else ''}}}'"
                " is not a plain variable (write {name}, no attributes, indexes or format specs)"
            )
        names.append(field)
    return names


def env_names(text: str) -> list[str]:
    """The ``${NAME}`` variables ``text`` names."""
    return ENV_RE.findall(text)


def env_placement_problem(field: str, value: str, *, location: bool) -> str | None:
    """Why ``value`` names an environment variable where it may not, or None. ``location``: the field may
    START with one ``${NAME}`` (a mirror's folder or base URL) followed by ``/`` or nothing; anywhere else,
    and in any field that is not a location, a variable is refused."""
    names = env_names(value)
    if not names and "${" not in value:
        return None
    if location and len(names) == 1 and value.startswith(f"${{{names[0]}}}"):
        rest = value[len(names[0]) + 3 :]
        if "${" not in rest and (not rest or rest.startswith("/")):
            return None
    where = "only as the whole start of the value (a mirror location)" if location else "not in this field"
    return (
        f"{field} {bounded(value)}: an environment variable may be used {where}, never inside a URL's path "
        "or query (it would be sent to the host); credentials belong in storage_options"
    )


_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_HEADERENV_RE = re.compile(r"^(?:[A-Za-z]+ )?\$\{[A-Za-z_][A-Za-z0-9_]*\}$")  # "${T}" or "Bearer ${T}"
RESERVED_HEADERS = frozenset({"host", "range", "user-agent", "accept-encoding", "content-length"})


def header_problem(name: str, value: str) -> str | None:
    """Why a recipe's request header is refused, or None: a valid name not set by the client itself, no
    control characters, and ``${NAME}`` only as the whole value or after one word (``Bearer ${TOKEN}``)."""
    if not _HEADER_NAME_RE.match(name) or name.lower() in RESERVED_HEADERS:
        return f"header {bounded(name)} is not a header a recipe may set"
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return f"header {name}: control characters in its value"
    if "${" in value and not _HEADERENV_RE.match(value):
        return f"header {name}: an environment variable is the whole value or follows one word"
    return None


def bounded(value: str, limit: int = 80) -> str:
    """``repr(value)`` of at most ``limit`` characters (cut before it is built)."""
    return repr(value[:limit]) + ("..." if len(value) > limit else "")


def storage_option_problem(options: Any, path: str = "storage_options") -> str | None:
    """An environment variable in ``storage_options`` anywhere but as a whole string value, or None."""
    if isinstance(options, str):
        if env_names(options) and ENV_RE.fullmatch(options) is None:
            return f"{path} {bounded(options)}: an environment variable must be the whole value (${{NAME}})"
        return None
    if isinstance(options, dict):
        for key, value in options.items():
            if isinstance(key, str) and "${" in key:
                return f"{path}: a key may not name an environment variable ({bounded(key)})"
            problem = storage_option_problem(value, f"{path}.{key}")
            if problem:
                return problem
    if isinstance(options, list):
        for i, value in enumerate(options):
            problem = storage_option_problem(value, f"{path}[{i}]")
            if problem:
                return problem
    return None
