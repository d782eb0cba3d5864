"""Hostile recipes through the real CLI: a "billion laughs" of nested YAML aliases (at the top level and
inside a ``local`` source's ``storage_options``), a 10,000-deep nesting and a 2 MB file are refused by
``vlmforge recipe check`` with a reason that names the limit, in bounded time and memory (the child's peak RSS
from ``getrusage``), and an error quoting a huge value stays short."""

from __future__ import annotations

from pathlib import Path

import pytest
from measured_child import run_measured
from pydantic import ValidationError

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.schemas.safe_yaml import bounded_repr, load_limited

CHECK_TIMEOUT_S = 300.0  # a kill switch for a regression, not a timing assertion
MAX_CHILD_RSS_MB = 600  # the CLI with its imports is ~150-250 MB; the unbounded case grew past 2.9 GB


def laughs(levels: int = 10, width: int = 9, indent: str = "") -> str:
    """``a0: &a0 [lol]`` then ``aN: &aN [*aN-1 x width]``: 9**10 leaves when walked."""
    lines = [f"{indent}a0: &a0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"{indent}a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def top_level_bomb() -> str:
    return "subset: bomb\nlicense: MIT\nsources: [{kind: release_tar}]\n" + laughs()


def storage_options_bomb() -> str:
    return (
        "subset: bomb\nlicense: MIT\nsources:\n  - kind: local\n    root: /tmp\n    storage_options:\n"
        + laughs(indent="      ")
    )


def deep_bomb() -> str:
    return "subset: bomb\nlicense: MIT\nsources: [{kind: release_tar}]\nx: " + "[" * 10_000 + "]" * 10_000


def big_file() -> str:
    return "subset: bomb\nlicense: MIT\nsources: [{kind: release_tar}]\nnotes: '" + "x" * 2_000_000 + "'\n"


def run_check(path: Path) -> tuple[int, str, float, float]:
    """``vlmforge recipe check PATH`` in a child: (exit code, output, seconds, its own peak RSS in MB)."""
    return run_measured(["recipe", "check", str(path)], path.with_suffix(".out"), CHECK_TIMEOUT_S)


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (top_level_bomb, "aliases"),
        (storage_options_bomb, "aliases"),
        (deep_bomb, "nested deeper than"),
        (big_file, "byte limit"),
    ],
    ids=["billion-laughs-top", "billion-laughs-storage-options", "deep", "big"],
)
def test_hostile_recipe_is_refused_by_recipe_check(build: object, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(build())  # type: ignore[operator]
    code, out, seconds, peak_mb = run_check(path)
    assert code != 0, out
    assert reason in out and "bomb.yaml" in out, out
    assert len(out) < 4000, out[:4000]
    assert peak_mb < MAX_CHILD_RSS_MB, f"recipe check peaked at {peak_mb:.0f} MB"
    print(f"{build.__name__}: refused in {seconds:.2f} s, child peak RSS {peak_mb:.0f} MB")  # type: ignore[attr-defined]


def test_a_valid_recipe_still_passes_the_check(tmp_path: Path) -> None:
    path = tmp_path / "fine.yaml"
    path.write_text("subset: fine\nlicense: MIT\nsources:\n  - kind: local\n    root: /tmp\n")
    code, out, _, _ = run_check(path)
    assert code == 0 and "fine.yaml: ok" in out, out


def test_limits_in_process() -> None:
    with pytest.raises(Exception, match="aliases"):
        load_limited("a: &x [1]\nb: *x\n")
    with pytest.raises(Exception, match="anchors and aliases"):
        load_limited("a: &x [1]\n")
    with pytest.raises(Exception, match="more than 10 YAML nodes"):
        loader_nodes = __import__("vlmforge.schemas.safe_yaml", fromlist=["_LimitedLoader"])._LimitedLoader
        old = loader_nodes.max_nodes
        loader_nodes.max_nodes = 10
        try:
            load_limited("[" + ", ".join(["1"] * 20) + "]")
        finally:
            loader_nodes.max_nodes = old
    assert load_limited("a: [1, {b: c}]") == {"a": [1, {"b": "c"}]}


def test_bounded_repr_walks_no_further_than_its_limit() -> None:
    shared: list[object] = ["lol"]
    for _ in range(40):  # 9**40 leaves if walked
        shared = [shared] * 9
    text = bounded_repr(shared, 80)
    assert len(text) <= 80 and text.startswith("[[[")
    assert bounded_repr("x" * 10_000_000, 20) == repr("x" * 17)[:17] + "..."
    assert bounded_repr({"a": 1}) == "{'a': 1}"


def test_validation_error_quotes_a_cut_value(tmp_path: Path) -> None:
    from vlmforge.tasks.catalog.recipe_files import RecipeError, load_recipe

    path = tmp_path / "s.yaml"
    path.write_text(
        "subset: s\nlicense: MIT\nsources: [{kind: release_tar}]\nextra: '" + "y" * 500_000 + "'\n"
    )
    with pytest.raises(RecipeError) as info:
        load_recipe(path)
    assert "extra" in str(info.value) and len(str(info.value)) < 1000
    with pytest.raises(ValidationError):
        parse_recipe({"subset": "s"})


def test_a_billion_laughs_in_a_release_readme_costs_nothing() -> None:
    """A release's README front matter is untrusted too: aliases under ``license:`` fall back to the words."""
    from vlmforge.tasks.catalog.licenses import detect_license

    front = "---\n" + laughs() + "license: *a10\n---\n# Data\n\nLicense: MIT\n"
    assert detect_license(front)[0] == "MIT"
