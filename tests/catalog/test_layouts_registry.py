"""The source-layout registry matches the ``--format`` choices, and an unknown format is named."""

from __future__ import annotations

from typing import get_args

import pytest

from vlmforge.schemas.config import SourceOptions
from vlmforge.tasks.errors import ReleaseError
from vlmforge.tasks.staging.layouts import LAYOUTS, layout_for


def test_every_staged_source_format_has_one_layout() -> None:
    formats = set(get_args(SourceOptions.model_fields["source_format"].annotation)) - {"nemotron"}
    assert set(LAYOUTS) == formats
    assert all(layout.name == key for key, layout in LAYOUTS.items())


def test_an_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(ReleaseError, match="unknown source format 'coco'; expected one of mantis, infovqa"):
        layout_for("coco")
