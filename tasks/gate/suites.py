"""The Great Expectations suites of ``expectations/``: their names and their JSON, read from the package.

The suites are data versioned with the code, not Python: a new expectation is a JSON entry (with a ``meta``
title, optional ``found`` format and ``examples`` query), never a new branch here. ``samples``, ``media``
and ``drift`` run between the manifests and the shards (:mod:`.check`); ``shards`` runs on the staged
Energon dataset before it is swapped into place (:mod:`.shards`).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

SUITES = ("samples", "media", "drift", "shards")
# Between manifests and shards; "shards" runs on the staged dataset.
GATE_SUITES = ("samples", "media", "drift")


@cache
def expectations_text(name: str) -> str:
    """The text of ``expectations/<name>.json`` (a suite, or the shipped ``overrides``), read once."""
    return resources.files("vlmforge.expectations").joinpath(f"{name}.json").read_text()


def load_suite(name: str) -> dict[str, Any]:
    """The suite ``expectations/<name>.json`` as a dict (a fresh copy)."""
    suite: dict[str, Any] = json.loads(expectations_text(name))
    return suite


def suites_digest() -> str:
    """sha256 of every shipped suite and the shipped overrides: what the gate checks, as this code version
    ships it (a verdict recorded under another digest was reached by other rules)."""
    h = hashlib.sha256()
    for name in (*SUITES, "overrides"):
        h.update(f"{name}\0{expectations_text(name)}\0".encode())
    return h.hexdigest()
