"""README's manifest column lists are the manifests' columns (``schemas/tables.py``, derived from
``schemas/rows.py``), in order: a column added to a row without its README entry fails here, naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vlmforge.schemas.tables import TABLES

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
HEADING = "Manifest columns (`schemas/tables.py`):\n"
ROW_TABLES = ("samples", "media", "subsets", "shards")  # the tables README lists column by column


def listed_columns(readme: str, table: str) -> list[str]:
    """The columns README's bullet for ``table`` names, its parenthesised notes aside."""
    section = readme.split(HEADING, 1)[1]
    m = re.search(rf"^- `{table}`: (.*?)(?=^- `|^\s*$)", section, flags=re.M | re.S)
    assert m is not None, f"README's manifest columns have no bullet for {table}"
    text = " ".join(m.group(1).split())
    while (plain := re.sub(r"\([^()]*\)", "", text)) != text:
        text = plain
    return [c.strip().rstrip(".").strip() for c in text.split(",")]


@pytest.mark.parametrize("table", ROW_TABLES)
def test_readme_lists_every_manifest_column(table: str) -> None:
    listed, columns = listed_columns(README, table), TABLES[table].names
    assert listed == columns, {
        "not in README": [c for c in columns if c not in listed],
        "README only": [c for c in listed if c not in columns],
    }


def test_a_column_missing_from_readme_is_caught() -> None:
    shorter = README.replace("out_ext, out_width", "out_width", 1)
    assert shorter != README
    assert "out_ext" not in listed_columns(shorter, "media")
