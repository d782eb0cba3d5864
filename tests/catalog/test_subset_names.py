"""Subset names are judged by the catalog, before any fetch, with the rule publish applies (one definition:
``schemas/subset_names.py``): a folder with a space or a non-ASCII letter is refused with a reason and a fix
hint, and NFC and NFD spellings of one name are recognised as one name."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlmforge.flows.cli import app
from vlmforge.schemas.recipes import parse_recipe
from vlmforge.schemas.subset_names import subset_name_problem, suggested_subset_name
from vlmforge.tasks.publish.dataset import _check_arguments

LINE = {"id": "r0", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}


def add_subset(release: Path, name: str) -> None:
    folder = release / name
    folder.mkdir(parents=True)
    (folder / f"{name}.jsonl").write_text(json.dumps(LINE) + "\n", encoding="utf-8")


def catalog(release: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["catalog", str(release), "--json", *args])
    error = "" if result.exception is None else f"{type(result.exception).__name__}: {result.exception}"
    return result.exit_code, result.output + error


def test_a_subset_with_a_space_is_refused_by_the_catalog_with_a_fix_hint(tmp_path: Path) -> None:
    add_subset(tmp_path, "good_one")
    add_subset(tmp_path, "bad name")
    code, out = catalog(tmp_path)
    assert code != 0, out
    assert (
        out.startswith("ReleaseError")
        and "'bad name'" in out
        and "' '" in out
        and "rename it to 'bad_name'" in out
    ), out
    code, out = catalog(tmp_path, "--subset", "good_one")  # the others still catalog
    assert code == 0 and json.loads(out)[0]["subset"] == "good_one", out


def test_nfc_and_nfd_spellings_are_one_name(tmp_path: Path) -> None:
    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    add_subset(tmp_path, nfc)
    add_subset(tmp_path, nfd)
    code, out = catalog(tmp_path)
    assert code != 0, out
    assert "two Unicode spellings" in out and "rename it to 'cafe'" in out, out
    code, out = catalog(tmp_path, "--subset", nfd)  # asked for in the other spelling: the same subset
    assert code != 0 and "two Unicode spellings" in out, out


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "is empty"),
        ("a.b", "'.'"),
        ("-x", "starts with"),
        ("x" * 200, "200 characters"),
        ("naïve", "'\\xef'"),
        ("a/b", "'/'"),
    ],
)
def test_the_one_rule(name: str, fragment: str) -> None:
    problem = subset_name_problem(name)
    assert problem is not None and fragment in problem, problem
    assert subset_name_problem(suggested_subset_name(name)) is None
    with pytest.raises(ValueError, match="a subset name is ASCII letters"):
        _check_arguments(name, 1, 1)  # publish says the same
    with pytest.raises(ValueError, match="a subset name is ASCII letters"):
        parse_recipe({"subset": name, "license": "MIT", "sources": [{"kind": "release_tar"}]})


def test_valid_names_pass() -> None:
    for name in ("chartqa_1", "CLEVR-2", "0x"):
        assert subset_name_problem(name) is None
