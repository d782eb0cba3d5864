"""A recipe's ``match`` regex runs with a budget (``schemas/recipe_match.py``): a pattern that backtracks
catastrophically, or a reference longer than the cap, is that reference's ``match_budget`` reject in well
under a second, never a batch that hangs past ``--fetch-batch-timeout``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from vlmforge.schemas.recipe_match import (
    MAX_MATCH_SUBJECT,
    MatchBudgetError,
    compile_match,
    search_bounded,
)
from vlmforge.schemas.recipes import parse_recipe, ref_variables
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext, FetchKnobs
from vlmforge.tasks.storage import ContentStore

EVIL = r"(x+x+)+y"  # exponential backtracking on a run of x without a y (Python's re: hours at 40 chars)
HANG_GUARD_S = 20.0  # generous for a loaded machine; the unbounded search never ends


def test_a_backtracking_pattern_is_stopped_by_its_budget() -> None:
    t0 = time.monotonic()
    with pytest.raises(MatchBudgetError, match=r"ran past its 0.05 s budget"):
        search_bounded(compile_match(EVIL), "x" * 4000, budget_s=0.05)
    assert time.monotonic() - t0 < HANG_GUARD_S


def test_a_reference_over_the_cap_is_not_searched() -> None:
    with pytest.raises(MatchBudgetError, match=f"over the {MAX_MATCH_SUBJECT}"):
        search_bounded(compile_match("a"), "a" * (MAX_MATCH_SUBJECT + 1))


def test_sane_patterns_give_their_groups() -> None:
    pattern = compile_match(r"(?:^|/)(?P<split>train|val)/png/(?P<file>[^/]+\.png)$")
    got = ref_variables("chart/train/png/a.png", pattern)
    assert got is not None and got["split"] == "train" and got["file"] == "a.png"
    assert ref_variables("chart/test/png/a.png", pattern) is None


def test_an_invalid_pattern_is_refused_at_load() -> None:
    with pytest.raises(ValidationError, match="match is not a valid regex"):
        parse_recipe({"subset": "s", "license": "MIT", "sources": [{"kind": "release_tar", "match": "(("}]})


def test_a_backtracking_match_rejects_its_reference_not_the_batch(tmp_path: Path) -> None:
    (tmp_path / "ok.jpg").write_bytes(b"fine")
    recipe = parse_recipe(
        {
            "subset": "s",
            "license": "MIT",
            "sources": [
                {"kind": "http_files", "url": "http://127.0.0.1:9/{name}", "match": EVIL},
                {"kind": "release_tar", "match": r"^ok\.jpg$"},
            ],
        }
    )
    long_ref = "x" * 3000 + ".jpg"
    t0 = time.monotonic()
    res = fetch_batch(
        ["ok.jpg", long_ref],
        recipe,
        ContentStore(str(tmp_path / "store")),
        context=FetchContext(str(tmp_path)),
        options=FetchKnobs(batch_timeout=30.0),
    )
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert res.outcomes["ok.jpg"].ok, res.outcomes["ok.jpg"]
    evil = res.outcomes[long_ref]
    assert evil.status == "match_budget" and "ran past its 0.25 s budget" in (evil.detail or ""), evil
    assert not evil.transient  # a later run would do the same: fix the pattern
