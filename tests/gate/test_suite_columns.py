"""A gate expectation is one entry in its suite's JSON (``expectations/<suite>.json``) over the columns of the
profile that suite is validated on (``tasks/gate/profiles.py``, ``drift.py``): every column an expectation
bounds or filters on is a profile column. A new expectation on a new fact fails here, naming the suite, the
expectation and the column, until the profile computes it (not at a run's gate, where a misnamed column
would hold every subset back); and every ``$PARAMETER`` is one the gate fills (``tasks/gate/params.py``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from vlmforge.schemas.tables import TABLES
from vlmforge.tasks.gate.drift import drift_profile
from vlmforge.tasks.gate.groups import suite_parameters
from vlmforge.tasks.gate.params import COMPUTED_PARAMS, OVERRIDABLE
from vlmforge.tasks.gate.profiles import (
    add_shard_views,
    media_profile,
    open_views,
    samples_profile,
    shards_profile,
)
from vlmforge.tasks.gate.suites import SUITES, load_suite
from vlmforge.tasks.publish.listing import listing_table

COLUMN_KWARGS = ("column", "column_A", "column_B")


def profile_columns() -> dict[str, list[str]]:
    """Each suite's profile columns, as the gate computes them (from empty manifests: the columns do not
    depend on the rows)."""
    views = {"samples": TABLES["samples"].empty_table(), "media": TABLES["media"].empty_table()}
    with open_views(views) as con:
        samples = samples_profile(con)
        media = media_profile(con, None)
        add_shard_views(con, [], listing_table([]))
        shards = shards_profile(con, published=False)
    drift = drift_profile(samples, None)
    return {
        name: list(frame.columns) for name, frame in zip(SUITES, (samples, media, drift, shards), strict=True)
    }


def columns_used(expectation: dict[str, Any]) -> set[str]:
    """The profile columns one expectation names: those it bounds and those its row condition reads."""
    kwargs = expectation["kwargs"]
    used = {kwargs[k] for k in COLUMN_KWARGS if k in kwargs}
    used |= set(re.findall(r"([A-Za-z_]\w*)\s*[=!<>]", kwargs.get("row_condition", "")))
    return used


def suite_problems(suite: dict[str, Any], columns: list[str]) -> list[str]:
    """One line per column an expectation of ``suite`` names that its profile (``columns``) lacks."""
    return [
        f"{suite['name']}.{e['meta']['name']}: {c} is not a column of the {suite['name']} profile"
        for e in suite["expectations"]
        for c in sorted(columns_used(e) - set(columns))
    ]


PROFILES = profile_columns()


@pytest.mark.parametrize("name", SUITES)
def test_every_expectation_names_columns_of_its_profile(name: str) -> None:
    problems = suite_problems(load_suite(name), PROFILES[name])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", SUITES)
def test_every_parameter_is_one_the_gate_fills(name: str) -> None:
    unknown = suite_parameters(load_suite(name)) - {*OVERRIDABLE, *COMPUTED_PARAMS}
    assert not unknown, f"{name}: $PARAMETER {sorted(unknown)} is neither a gate default nor a run option"


def test_an_expectation_on_a_column_the_profile_lacks_is_caught() -> None:
    suite = load_suite("samples")
    new = json.loads(json.dumps(suite["expectations"][0]))
    new["kwargs"]["column"], new["meta"]["name"] = "blank_captions", "no_blank_captions"
    suite["expectations"].append(new)
    assert suite_problems(suite, PROFILES["samples"]) == [
        "samples.no_blank_captions: blank_captions is not a column of the samples profile"
    ]
    assert suite_problems(suite, [*PROFILES["samples"], "blank_captions"]) == []
    new["kwargs"]["row_condition"] = 'caption_kind=="long"'
    assert suite_problems(suite, [*PROFILES["samples"], "blank_captions"]) == [
        "samples.no_blank_captions: caption_kind is not a column of the samples profile"
    ]
