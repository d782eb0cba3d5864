"""The source registry: every recipe source kind has exactly one implementation, found by its ``kind``."""

from __future__ import annotations

from vlmforge.schemas.recipes import REMOTE_KINDS, SOURCE_KINDS, SOURCE_MODELS
from vlmforge.tasks.fetch.sources import SOURCES


def test_every_recipe_source_kind_has_one_implementation() -> None:
    assert set(SOURCES) == set(SOURCE_KINDS)
    assert all(source.kind == kind for kind, source in SOURCES.items())


def test_remote_kinds_come_from_the_models() -> None:
    assert {"http_files", "archive", "s3", "hf"} == REMOTE_KINDS
    assert len(SOURCE_MODELS) == len(SOURCE_KINDS)
