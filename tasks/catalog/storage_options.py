"""``--storage-option key=value`` pairs as the fsspec storage options a release is opened with."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ..errors import ReleaseError


def parse_storage_options(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``--storage-option key=value`` pairs as fsspec storage options.

    A value that reads as JSON (``true``, ``3``, ``{"a": 1}``) is taken as such, anything else as a string;
    a dotted key nests (``client_kwargs.endpoint_url=http://127.0.0.1:9000``).
    """
    out: dict[str, Any] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:  # the text is not echoed: it may be a secret given without its key
            raise ReleaseError(f"--storage-option #{i}: expected key=value (got no '=' or no key)")
        try:
            value: Any = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ReleaseError(f"--storage-option {pair!r}: {p!r} is already set to a value")
            node = child
        node[leaf] = value
    return out
