"""Option values as people type them (``1GB``, ``key=value``, ``CC-BY-4.0,MIT``) read into what the run
config holds. Pure functions raising ``ValueError``: the config models apply them to whatever reaches them
(a CLI flag, a ``prefect.yaml`` parameter, a test), so each form is read in one place."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["comma_list", "size_bytes", "storage_pairs"]

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(i?)b?|b)?\s*$", re.IGNORECASE)
_SIZE_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def size_bytes(text: str | int) -> int:
    """Bytes from a size such as ``1GB``, ``512MiB``, ``1.5G``, ``700kb`` or ``4096`` (plain bytes).

    Decimal units (``KB``, ``MB``, ``GB``, ``TB``, ``PB``, with or without ``B``) are powers of 1000, binary
    units (``KiB``, ``MiB``, ...) powers of 1024, case-insensitive. ValueError with the accepted forms
    otherwise (also for zero).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise ValueError(
                f"invalid size {text!r}: use a number with an optional unit, e.g. 1GB, 512MiB, 1.5G, 4096"
            )
        number, unit, binary = match.group(1), (match.group(2) or "").lower(), bool(match.group(3))
        value = float(number) * (1024 if binary else 1000) ** _SIZE_POWER[unit]
    if value < 1:
        raise ValueError(f"invalid size {text!r}: must be at least 1 byte")
    return int(value)


def storage_pairs(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``--storage-option key=value`` pairs as fsspec storage options.

    A value that reads as JSON (``true``, ``3``, ``{"a": 1}``) is taken as such, anything else as a string;
    a dotted key nests (``client_kwargs.endpoint_url=http://127.0.0.1:9000``).
    """
    out: dict[str, Any] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:  # the text is not echoed: it may be a secret given without its key
            raise ValueError(f"--storage-option #{i}: expected key=value (got no '=' or no key)")
        try:
            value: Any = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ValueError(f"--storage-option {key!r}: {p!r} is already set to a value")
            node = child
        node[leaf] = value
    return out


def comma_list(values: Iterable[str] | None) -> tuple[str, ...]:
    """``--license-allow CC-BY-4.0,MIT --license-allow Apache-2.0`` as one list."""
    return tuple(p.strip() for v in values or () for p in v.split(",") if p.strip())
