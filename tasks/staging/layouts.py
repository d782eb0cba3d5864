"""The source layouts staging reads, keyed by their ``--format`` name (``SourceOptions.source_format``).

Every layout answers the same two questions (:class:`SourceLayout`): which configs a release holds, and
the staged JSONL lines of one config. ``nemotron`` is not here: a Nemotron release is read as it is.

Adding a layout: one module beside these (a class with ``name``, ``configs`` and ``lines``), one line in
:data:`LAYOUTS`, the name in ``SourceOptions.source_format``, and a test with a small replica of the layout.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from fsspec import AbstractFileSystem

from ..errors import ReleaseError
from .common import LayoutConfig, Stager
from .infovqa import InfoVqaLayout
from .llava_video import LlavaVideoLayout
from .mantis import MantisLayout


class SourceLayout(Protocol):
    name: str

    def configs(self, fs: AbstractFileSystem, root: str) -> list[LayoutConfig]:
        """The configs of the release at ``root``, in a stable order (what ``--config`` selects)."""
        ...

    def lines(self, fs: AbstractFileSystem, cfg: LayoutConfig, stager: Stager) -> Iterator[bytes]:
        """One staged JSONL line per source row, in source order; media go through ``stager``."""
        ...


LAYOUTS: dict[str, SourceLayout] = {
    "mantis": MantisLayout(),  # TIGER-Lab/Mantis-Instruct
    "infovqa": InfoVqaLayout(),  # Ahren09/InfoVQA
    "llava_video": LlavaVideoLayout(),  # lmms-lab/LLaVA-Video-178K
}


def layout_for(fmt: str) -> SourceLayout:
    """The layout named ``fmt``; a ``ReleaseError`` naming the known ones otherwise."""
    layout = LAYOUTS.get(fmt)
    if layout is None:
        raise ReleaseError(f"unknown source format {fmt!r}; expected one of {', '.join(LAYOUTS)}")
    return layout
