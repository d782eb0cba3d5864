"""Upstream media source kinds, one module each behind :class:`~.media_source.MediaSource` (the kind's fetch
and its sizer), found by the recipe source's ``kind`` in :data:`SOURCES`: the one registration of a kind."""

from __future__ import annotations

from typing import Any

from ....schemas.source_registry import by_source_kind
from .archive import Archive
from .hf import Hf
from .http_files import HttpFiles
from .local import Local
from .media_source import PARTS, MediaSource
from .release_tar import ReleaseTar
from .s3 import S3

SOURCES: dict[str, MediaSource[Any]] = by_source_kind(
    (ReleaseTar(), Local(), HttpFiles(), Archive(), S3(), Hf()), "media source", PARTS
)
