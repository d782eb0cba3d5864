"""``--storage-option key=value`` pairs as the fsspec storage options a release is opened with."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...schemas.option_values import storage_pairs
from ..errors import ReleaseError


def parse_storage_options(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``--storage-option key=value`` pairs as fsspec storage options (:func:`storage_pairs`), a
    :class:`ReleaseError` saying which pair is wrong otherwise."""
    try:
        return storage_pairs(pairs)
    except ValueError as exc:
        raise ReleaseError(str(exc)) from None
