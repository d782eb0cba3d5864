"""A key given twice in a recipe (``url:`` twice in one source, ``sources:`` twice) is refused with one line
naming the file, the key and both lines, instead of PyYAML's silent last-wins (``schemas/safe_yaml.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.schemas.safe_yaml import YamlLimitError, load_limited
from vlmforge.tasks.catalog import RecipeError, load_recipe


def test_a_repeated_key_in_a_recipe_is_refused_naming_key_file_and_lines(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(
        "subset: dup\nlicense: MIT\nsources:\n  - kind: http_files\n"
        "    url: https://mirror.example/{name}\n    url: https://other.example/{name}\n"
    )
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text, text
    assert "line 6: duplicate key 'url' (first at line 5)" in text, text


@pytest.mark.parametrize(
    ("text", "key"),
    [("a: 1\nb: 2\na: 3\n", "a"), ("x: {k: 1, k: 2}\n", "k"), ("1: a\n1.0: b\n", "1.0")],
    ids=["top", "flow", "equal-values"],
)
def test_duplicates_at_any_level_and_form(text: str, key: str) -> None:
    with pytest.raises(YamlLimitError, match=f"duplicate key '{key}'"):
        load_limited(text)


def test_distinct_keys_and_the_opt_out() -> None:
    assert load_limited("a: 1\nb: {a: 2}\n") == {"a": 1, "b": {"a": 2}}  # the same key in two mappings
    assert load_limited("a: 1\na: 2\n", unique_keys=False) == {"a": 2}  # a README card: PyYAML's rule
