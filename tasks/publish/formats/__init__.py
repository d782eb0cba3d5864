"""Energon sample formats, by name: one module per format behind :class:`~.base.SampleFormat`.

The shard writer looks a format up here (``FORMATS[name]``); adding a format is a module in this package
and one entry below.
"""

from __future__ import annotations

from pathlib import Path

from .chatml import BridgeFormat
from .crude import CrudeFormat
from .sample_format import SampleFormat

__all__ = ["DEFAULT_FORMAT", "FORMATS", "format_of_dataset", "get_format"]

FORMATS: dict[str, SampleFormat] = {fmt.name: fmt for fmt in (BridgeFormat(), CrudeFormat())}
#: Megatron-Bridge's ``ChatMLWebdataset``: what Bridge's VLM recipes read with no vlmforge code.
DEFAULT_FORMAT = BridgeFormat.name


def get_format(name: str) -> SampleFormat:
    """The registered format ``name``; ValueError naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown sample format {name!r}; known: {', '.join(sorted(FORMATS))}") from None


def format_of_dataset(dataset: Path) -> SampleFormat:
    """The registered format whose ``dataset.yaml`` ``dataset`` ships; ValueError when none matches."""
    text = (Path(dataset) / ".nv-meta" / "dataset.yaml").read_text(encoding="utf-8")
    for fmt in FORMATS.values():
        if fmt.dataset_yaml == text:
            return fmt
    raise ValueError(
        f"{dataset}: .nv-meta/dataset.yaml is not one of vlmforge's formats ({', '.join(FORMATS)})"
    )
