"""The grouped gate (:mod:`vlmforge.tasks.gate.groups`): one validation per suite over several subsets'
profiles gives every subset the verdict, failure lines, warnings and parameters of its own gate, and a
subset that fails in a group of passing ones fails exactly as alone. Real DuckDB, real Great Expectations."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from gate_manifests import build_out

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import GateWork
from vlmforge.tasks.gate.check import GateInputs, gate_inputs, gate_one
from vlmforge.tasks.gate.docs import build_data_docs
from vlmforge.tasks.gate.drift import Baseline
from vlmforge.tasks.gate.groups import (
    GROUP_META,
    gate_group,
    gate_subsets,
    group_suite,
    groupable,
    shared_params,
)
from vlmforge.tasks.gate.params import load_overrides
from vlmforge.tasks.gate.results import GateResult, record_gate, record_run
from vlmforge.tasks.gate.suites import GATE_SUITES, load_suite
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.sample_release.chat import asst, dump, txt, user
from vlmforge.tasks.sample_release.files import readme, write_files, write_jsonl

SAMPLE_RELEASE_OVERRIDES = Path(__file__).resolve().parents[2] / "expectations/sample-release-overrides.json"
TEXT_ONLY = ("text_chat_a", "text_chat_b")
COMPARED = ("subset", "passed", "suites", "failures", "warnings", "relaxed", "params", "stage", "engine")


@pytest.fixture(scope="module")
def built(
    sample_release: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunConfig, list[SubsetEntry]]:
    """Manifests of the sample release and two text-only subsets, batch by batch (no Prefect, no Ray)."""
    root = tmp_path_factory.mktemp("groups")
    release = root / "release"
    shutil.copytree(sample_release, release)
    for subset in TEXT_ONLY:
        _write_text_subset(release, subset, rows=5)
    return build_out(release, root / "out")


def _write_text_subset(release: Path, subset: str, rows: int) -> None:
    """A subset of text-only conversations: its media manifest, and so its media profile, is empty."""
    lines = [
        dump({"id": f"{subset}-{i}", "messages": [user(txt(f"Question {i}?")), asst(f"Answer {i}.")]})
        for i in range(rows)
    ]
    (release / subset).mkdir()
    write_jsonl(release / subset / f"{subset}.jsonl", lines)
    source = "Text-only conversations written by the test."
    write_files(
        release,
        {
            f"{subset}/README.md": readme(
                subset, subset, source, "https://example.invalid/", [], "License: CC0"
            )
        },
    )


@pytest.fixture(scope="module")
def inputs(built: tuple[RunConfig, list[SubsetEntry]]) -> list[GateInputs]:
    """Each subset's gate inputs, bad_rows with its shipped override (every subset passes)."""
    cfg, entries = built
    overrides = load_overrides(SAMPLE_RELEASE_OVERRIDES)
    return [gate_inputs(GateWork.of(cfg), e, run_id="r1", overrides=overrides) for e in entries]


def _fields(result: GateResult) -> dict[str, Any]:
    return {k: v for k, v in result.to_json().items() if k in COMPARED}


def _expectation_results(result: GateResult, suite: str) -> list[str]:
    """A suite's stored results per expectation, as JSON (the validation's times and ids aside)."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in result.results[suite]["results"])


def _assert_as_alone(group: list[GateInputs]) -> list[GateResult]:
    """The grouped gate gives each subset its own gate's fields, and a failing suite its own stored result."""
    alone = [gate_one(i) for i in group]
    grouped = gate_group(group)
    assert [_fields(r) for r in grouped] == [_fields(r) for r in alone]
    for a, g in zip(alone, grouped, strict=True):
        for suite, ok in a.suites.items():
            if not ok or a.warnings:
                assert _expectation_results(g, suite) == _expectation_results(a, suite)
    return grouped


def _group_of(result: GateResult, suite: str) -> list[str] | None:
    """The subsets of the group validation whose result ``result`` stores for ``suite`` (None: its own)."""
    group = result.results[suite]["meta"].get(GROUP_META)
    return None if group is None else list(group["subsets"])


def _with_params(i: GateInputs, **params: Any) -> GateInputs:
    return dataclasses.replace(i, params=i.params | params)


def test_passing_subsets_share_a_validation_and_store_its_result_naming_the_group(
    inputs: list[GateInputs],
) -> None:
    grouped = _assert_as_alone(inputs)
    assert all(r.passed for r in grouped)
    # bad_rows' own max_reject_rate puts it in a partition of its own: validated alone
    others = [i.subset for i in inputs if i.subset != "bad_rows"]
    assert [_group_of(r, "samples") for r in grouped] == [
        None if r.subset == "bad_rows" else others for r in grouped
    ]
    assert all(_group_of(r, "drift") == [i.subset for i in inputs] for r in grouped)
    samples = grouped[-1].results["samples"]
    (rows_check,) = [
        r for r in samples["results"] if r["expectation_config"]["meta"]["name"] == "rows_per_line"
    ]
    assert rows_check["expectation_config"]["type"] == "expect_column_pair_values_to_be_equal"
    assert len(samples["results"]) == len(load_suite("samples")["expectations"])


def test_a_subset_whose_rows_differ_from_the_catalog_fails_in_a_passing_group_as_alone(
    inputs: list[GateInputs],
) -> None:
    """Its profile rows sum to the others' catalog total plus one: a sum over the group would not see it."""
    group = list(inputs)
    group[1] = _with_params(group[1], rows=group[1].params["rows"] + 1)
    grouped = _assert_as_alone(group)
    assert [r.passed for r in grouped] == [i != 1 for i in range(len(group))]
    assert grouped[1].failures[0].startswith("samples: one row per input line")
    # the group's validation failed: each of its subsets was validated again alone
    assert all(_group_of(r, "samples") is None for r in grouped)
    assert all(_group_of(r, "drift") == [i.subset for i in group] for r in grouped)


@pytest.mark.slow  # several GX validations, grouped then one by one (7 s)
def test_a_limit_that_fails_several_subsets_fails_each_as_alone(inputs: list[GateInputs]) -> None:
    group = [_with_params(i, seq_len=40) for i in inputs]
    grouped = _assert_as_alone(group)
    assert any(not r.passed for r in grouped)


def test_drift_fails_the_subset_that_moved_as_alone(inputs: list[GateInputs]) -> None:
    group = [
        dataclasses.replace(i, baseline=Baseline("r0", rows=1000, token_sum=1, rejected=0)) for i in inputs
    ]
    group[0] = dataclasses.replace(group[0], baseline=None)
    grouped = _assert_as_alone(group)
    assert grouped[0].suites["drift"] and not grouped[1].suites["drift"]


@pytest.mark.slow  # every override's suite validated grouped and alone (6 s)
def test_overrides_that_warn_or_switch_off_an_expectation_give_the_same_verdicts(
    inputs: list[GateInputs],
) -> None:
    warn = {"samples.within_seq_len": "warn"}
    group = [dataclasses.replace(_with_params(i, seq_len=40), modes=warn) for i in inputs]
    group[0] = dataclasses.replace(
        group[0], modes={"samples.within_seq_len": "off", "drift.rows_moved": "off"}
    )
    grouped = _assert_as_alone(group)
    assert any(r.warnings for r in grouped) and grouped[0].relaxed == {
        "drift.rows_moved": "off",
        "samples.within_seq_len": "off",
    }


def test_a_suite_that_refers_to_rows_otherwise_cannot_be_grouped() -> None:
    spec = load_suite("samples")
    spec["expectations"].append(
        {"type": "expect_table_row_count_to_equal", "kwargs": {"value": {"$PARAMETER": "rows"}}}
    )
    with pytest.raises(ValueError, match=r"refers to \$rows"):
        group_suite(spec)
    aggregate = load_suite("samples")
    aggregate["expectations"].append(
        {"type": "expect_column_max_to_be_between", "kwargs": {"column": "rows"}}
    )
    with pytest.raises(ValueError, match="not row by row"):
        group_suite(aggregate)
    assert all(groupable(s) for s in GATE_SUITES)
    with pytest.raises(ValueError, match=r"\$seq_len differs"):
        shared_params(load_suite("samples"), [{"seq_len": 10}, {"seq_len": 20}])


def test_the_flow_entry_and_the_data_docs_of_a_group(built: tuple[RunConfig, list[SubsetEntry]]) -> None:
    """gate_subsets records what gate_subset would; a group's page says which subsets it validated."""
    cfg, entries = built
    overrides = load_overrides(SAMPLE_RELEASE_OVERRIDES)
    results = gate_subsets(GateWork.of(cfg), entries, run_id="r1", overrides=overrides)
    assert all(r.passed for r in results)
    layout = OutputLayout(cfg.out)
    record_run(layout, "r1", subsets=[e.subset for e in entries], skip_gate=False, overrides=overrides)
    for r in results:
        record_gate(layout, "r1", r)
    docs = build_data_docs(layout, "r1")
    grouped = [e.subset for e in entries if e.subset != "bad_rows"]  # bad_rows: its own max_reject_rate
    page = Path(cfg.out) / "quality" / "r1" / "docs" / docs.pages[(grouped[0], "samples")]
    assert (
        f"samples profiles of {len(grouped)} subsets in one validation ({', '.join(grouped)})"
        in page.read_text()
    )


def test_subsets_without_media_share_the_media_validation_but_not_the_row_count(
    inputs: list[GateInputs],
) -> None:
    """A text-only subset's media profile is empty: nothing in it can fail a row-wise expectation, so it
    joins the media group; its samples' rows are still counted against its own catalog."""
    grouped = _assert_as_alone(inputs)
    by_subset = {r.subset: r for r in grouped}
    media_group = _group_of(by_subset[TEXT_ONLY[0]], "media")
    assert media_group is not None and set(TEXT_ONLY) <= set(media_group)
    assert len(media_group) == len(inputs)
    short = [_with_params(i, rows=i.params["rows"] + 1) if i.subset == TEXT_ONLY[0] else i for i in inputs]
    failed = {r.subset: r for r in gate_group(short)}[TEXT_ONLY[0]]
    assert not failed.passed and failed.failures[0].startswith("samples: one row per input line")


def test_a_subset_whose_manifest_cannot_be_read_fails_alone_in_the_flows_gate(
    built: tuple[RunConfig, list[SubsetEntry]], tmp_path: Path
) -> None:
    """The flow's gate task over a group: one subset's samples manifest is not Parquet, so the group's
    profiles cannot be made; that subset fails with its read error and every other one passes, recorded."""
    from vlmforge.flows.stage_tasks import SubsetFailure, gate_task

    cfg, entries = built
    out = tmp_path / "out"
    shutil.copytree(cfg.out, out)
    cfg = cfg.model_copy(
        update={
            "out": str(out),
            "gate": cfg.gate.model_copy(update={"gate_overrides": str(SAMPLE_RELEASE_OVERRIDES)}),
        }
    )
    broken = entries[1].subset
    layout = OutputLayout(str(out))
    Path(layout.parts("samples", broken)[0]).write_bytes(b"not parquet")
    results = gate_task.fn(cfg, entries, "r2", "test")
    by_subset = dict(zip([e.subset for e in entries], results, strict=True))
    failure = by_subset.pop(broken)
    assert isinstance(failure, SubsetFailure) and "parquet" in failure.detail.lower(), failure
    assert all(isinstance(r, GateResult) and r.passed for r in by_subset.values()), by_subset
    recorded = {p.name for p in (out / "quality" / "r2").iterdir()}
    assert {f"{s}.json" for s in by_subset} <= recorded and f"{broken}.json" not in recorded
