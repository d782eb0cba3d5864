"""The source registry: every recipe source kind has exactly one implementation, found by its ``kind``, with
each part (its fetch, its sizer), and the README URL shapes `recipe init` drafts name real kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.schemas.recipes import REMOTE_KINDS, SOURCE_KINDS, SOURCE_MODELS, parse_recipe
from vlmforge.schemas.source_registry import by_source_kind
from vlmforge.tasks.catalog.recipe_init import URL_SHAPES, source_for_url
from vlmforge.tasks.fetch.sources import SOURCES
from vlmforge.tasks.fetch.sources.media_source import PARTS


def test_every_recipe_source_kind_has_one_implementation() -> None:
    assert list(SOURCES) == list(SOURCE_KINDS)
    assert all(source.kind == kind for kind, source in SOURCES.items())


def test_every_recipe_source_kind_has_its_fetch_and_its_sizer() -> None:
    assert set(PARTS) == {"answer", "size"}
    for source in SOURCES.values():
        assert callable(source.answer) and callable(source.size), source


class _Kind:
    """A stand-in implementation of a source kind: ``kind`` and the parts named."""

    def __init__(self, kind: str, *parts: str) -> None:
        self.kind = kind
        for part in parts:
            setattr(self, part, lambda *args: {})


def test_a_kind_without_its_implementation_fails_where_the_registry_is_built() -> None:
    impls = [_Kind(kind, *PARTS) for kind in SOURCE_KINDS]
    assert list(by_source_kind(impls, "media source", PARTS)) == list(SOURCE_KINDS)
    with pytest.raises(ValueError, match=r"one media source: none for \['hf'\]"):
        by_source_kind([p for p in impls if p.kind != "hf"], "media source", PARTS)
    with pytest.raises(ValueError, match=r"\['not_a_kind'\] are not kinds"):
        by_source_kind([*impls, _Kind("not_a_kind", *PARTS)], "media source", PARTS)
    with pytest.raises(ValueError, match="two media sources of source kind 's3'"):
        by_source_kind([*impls, _Kind("s3", *PARTS)], "media source", PARTS)


@pytest.mark.parametrize("part", list(PARTS))
def test_a_kind_lacking_a_part_fails_naming_the_kind_and_the_part(part: str) -> None:
    """A kind whose class has its fetch but no sizer (or the other way round) is refused at import."""
    impls = [_Kind(kind, *PARTS) for kind in SOURCE_KINDS if kind != "archive"]
    impls.append(_Kind("archive", *(p for p in PARTS if p != part)))
    with pytest.raises(
        ValueError, match=rf"source kind 'archive': _Kind has no {part}\(\) \({PARTS[part]}\)"
    ):
        by_source_kind(impls, "media source", PARTS)


def test_remote_kinds_come_from_the_models() -> None:
    assert {"http_files", "archive", "s3", "hf"} == REMOTE_KINDS
    assert len(SOURCE_MODELS) == len(SOURCE_KINDS)


# One README URL per shape `recipe init` knows, and the source kind it drafts.
URL_CASES = [
    ("https://huggingface.co/datasets/o/n/resolve/main/images.zip", "archive"),
    ("https://huggingface.co/datasets/o/n/tree/main/images", "hf"),
    ("https://example.org/media.tar.gz?download=1", "archive"),
    ("s3://bucket/prefix/", "s3"),
    ("https://bucket.s3.us-east-1.amazonaws.com/prefix/", "s3"),
    ("https://github.com/o/r/tree/main/images", "http_files"),
    ("https://example.org/images/", "http_files"),
]


@pytest.mark.parametrize(("url", "kind"), URL_CASES)
def test_each_url_shape_drafts_a_source_of_its_kind(url: str, kind: str) -> None:
    """Every shape is reached by some URL, and drafts a source a recipe accepts."""
    shape = next(s for s in URL_SHAPES if s.draft(url) is not None)
    assert shape.kind == kind and shape.kind in SOURCE_KINDS
    source = source_for_url(url)
    assert source is not None and source["kind"] == kind
    parse_recipe({"subset": "s", "license": "unknown", "sources": [source]})


def test_url_shapes_come_from_the_models_in_one_declared_order() -> None:
    """Each model declares its shapes; recipe init tries them all, by rank, and no two ranks tie."""
    declared = [(kind, s) for m, kind in zip(SOURCE_MODELS, SOURCE_KINDS, strict=True) for s in m.url_shapes]
    assert sorted((d.kind, d.shape.rank) for d in URL_SHAPES) == sorted((k, s.rank) for k, s in declared)
    ranks = [d.shape.rank for d in URL_SHAPES]
    assert ranks == sorted(set(ranks)), "two URL shapes of one rank: their order would be the kinds' order"


def test_every_url_shape_is_tried_by_a_case() -> None:
    first = {next(i for i, s in enumerate(URL_SHAPES) if s.draft(u) is not None) for u, _ in URL_CASES}
    assert first == set(range(len(URL_SHAPES))), "a URL shape no case reaches"


def test_readme_names_every_source_kind() -> None:
    """A user learns the kinds from README's recipe section: a new kind is named there too."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Media upstream: recipes and the fetch stage", 1)[1].split("\n### ", 1)[0]
    missing = [kind for kind in SOURCE_KINDS if f"`{kind}`" not in section]
    assert not missing, f"README's recipe section does not name the source kinds {missing}"
