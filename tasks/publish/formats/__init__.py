"""Energon sample formats, by name: one module per format behind :class:`~.base.SampleFormat`.

The shard writer looks a format up here (``FORMATS[name]``); adding a format is a module in this package
and one entry below.
"""

from __future__ import annotations

from .base import SampleFormat
from .crude import CrudeFormat

__all__ = ["DEFAULT_FORMAT", "FORMATS", "get_format"]

FORMATS: dict[str, SampleFormat] = {fmt.name: fmt for fmt in (CrudeFormat(),)}
DEFAULT_FORMAT = CrudeFormat.name


def get_format(name: str) -> SampleFormat:
    """The registered format ``name``; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown sample format {name!r}; known: {', '.join(sorted(FORMATS))}") from None
