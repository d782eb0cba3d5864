"""The gate judges what is published: ok samples and their media. Manifests built by a real batch from a
generated release (catalog, parse, media, tokens: no mocks), then gated as a run would gate them; and the
per-expectation overrides (off / warn) of a gate-overrides file."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork, GateWork
from vlmforge.tasks.errors import ConfigError
from vlmforge.tasks.gate.check import gate_inputs, gate_one, gate_subset
from vlmforge.tasks.gate.params import GateOverrides, expectation_names, load_overrides
from vlmforge.tasks.gate.suites import SUITES, load_suite
from vlmforge.tasks.manifests import OutputLayout, read_table

SUBSET = "odd"
Rows = list[dict[str, Any]]


def _png(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def _sample(id_: str, images: list[str], answer: str) -> str:
    content: list[dict[str, Any]] = [{"type": "image", "image": ref} for ref in images]
    content.append({"type": "text", "text": "What is shown?"})
    return json.dumps(
        {
            "id": id_,
            "messages": [
                {"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": answer}]},
            ],
        }
    )


LINES = [
    _sample("a", ["images/red.png"], "A red square."),
    # good images around a broken one: the sample is rejected, its good images are ok without token counts
    _sample("multi", ["images/red.png", "images/html.png", "images/blue.png"], "Three things."),
    # the id of line 1 with other content: kept under a distinct key, id_conflict_of = 1
    _sample("a", ["images/blue.png"], "A blue square."),
    _sample("b", ["images/blue.png"], "Another blue square."),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, SubsetEntry]:
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release

    root = tmp_path_factory.mktemp("published_only")
    folder = root / "release" / SUBSET
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "red.png").write_bytes(_png((64, 48), (200, 30, 30)))
    (folder / "images" / "blue.png").write_bytes(_png((40, 60), (30, 30, 200)))
    (folder / "images" / "html.png").write_bytes(b"<html><body>not found</body></html>")
    (folder / f"{SUBSET}.jsonl").write_text("".join(line + "\n" for line in LINES))
    cfg = RunConfig(release=str(root / "release"), out=str(root / "out"), batch_lines=4, max_reject_rate=1.0)
    (entry,) = catalog_release(cfg.source.release, batch_lines=cfg.batches.batch_lines)
    for i in range(len(entry.batch_offsets) - 1):
        build_batch(entry, i, BatchWork.of(cfg))
    return cfg, entry


def _manifests(cfg: RunConfig) -> tuple[Rows, Rows]:
    layout = OutputLayout(cfg.out)
    return read_table(layout, "samples", SUBSET).to_pylist(), read_table(layout, "media", SUBSET).to_pylist()


def test_the_manifests_hold_both_cases(built: tuple[RunConfig, SubsetEntry]) -> None:
    """What the gate used to fail on really is in a real batch's manifests."""
    samples, media = _manifests(built[0])
    by_line = {r["line"]: r for r in samples}
    assert [by_line[n]["status"] for n in (1, 2, 3, 4)] == ["ok", "rejected", "ok", "ok"]
    assert by_line[2]["reason"].startswith("media_error")
    good_in_rejected = [r for r in media if r["line"] == 2 and r["status"] == "ok"]
    assert good_in_rejected and all(r["visual_tokens"] is None for r in good_in_rejected)
    assert by_line[3]["sample_id"] == by_line[1]["sample_id"] == "a"
    assert by_line[3]["id_conflict_of"] == 1 and by_line[3]["key"] != by_line[1]["key"]


def test_a_subset_with_only_such_cases_passes_at_reject_rate_one(
    built: tuple[RunConfig, SubsetEntry],
) -> None:
    cfg, entry = built
    result = gate_subset(GateWork.of(cfg), entry, run_id="r1", overrides=load_overrides())
    assert result.passed, result.failures
    assert result.suites == {"samples": True, "media": True, "drift": True}
    assert result.warnings == [] and result.relaxed == {}


def _gate(
    samples: Rows, media: Rows, built: tuple[RunConfig, SubsetEntry], overrides: GateOverrides | None = None
) -> Any:
    """The samples and media suites of the built run's subset, on these rows in place of its manifests."""
    from vlmforge.schemas.tables import MEDIA, SAMPLES

    cfg, entry = built
    inputs = gate_inputs(GateWork.of(cfg), entry, run_id=None, overrides=overrides or GateOverrides())
    tables = {
        "samples": pa.Table.from_pylist(samples, schema=pa.schema([f.with_nullable(True) for f in SAMPLES])),
        "media": pa.Table.from_pylist(media, schema=pa.schema([f.with_nullable(True) for f in MEDIA])),
    }
    return gate_one(dataclasses.replace(inputs, **tables), suites=("samples", "media"))


def test_the_same_faults_in_published_rows_still_fail(built: tuple[RunConfig, SubsetEntry]) -> None:
    """The rules are narrowed to what is published, not switched off."""
    samples, media = _manifests(built[0])
    s, m = copy.deepcopy(samples), copy.deepcopy(media)
    next(r for r in m if r["line"] == 1)["visual_tokens"] = None  # a published image without tokens
    (line,) = _gate(s, m, built).failures
    assert line.startswith("media: images after the model's resize at least min_pixels"), line
    s, m = copy.deepcopy(samples), copy.deepcopy(media)
    next(r for r in s if r["line"] == 3)["id_conflict_of"] = None  # an unrecorded reuse of an id
    (line,) = _gate(s, m, built).failures
    assert line.startswith("samples: ok sample ids are unique: found 2 rows; e.g. sample_id=a copies=2"), line


def _overrides(tmp_path: Path, subsets: dict[str, Any]) -> Path:
    path = tmp_path / "gate.json"
    path.write_text(json.dumps({"subsets": subsets}))
    return path


def test_one_expectation_can_be_switched_off_or_to_a_warning_for_one_subset(
    built: tuple[RunConfig, SubsetEntry], tmp_path: Path
) -> None:
    samples, media = _manifests(built[0])
    a, b = [r for r in samples if r["status"] == "ok"][:2]
    b["key"] = a["key"]  # breaks "Energon keys are unique" and nothing else
    assert not _gate(samples, media, built).passed

    off = load_overrides(_overrides(tmp_path, {"od*": {"expectations": {"samples.keys_unique": "off"}}}))
    result = _gate(samples, media, built, overrides=off)
    assert result.passed and result.failures == [] and result.warnings == []
    assert result.relaxed == {"samples.keys_unique": "off"}
    assert len(result.results["samples"]["results"]) == len(load_suite("samples")["expectations"]) - 1

    warn = load_overrides(_overrides(tmp_path, {SUBSET: {"expectations": {"samples.keys_unique": "warn"}}}))
    result = _gate(samples, media, built, overrides=warn)
    assert result.passed and result.failures == []
    (line,) = result.warnings
    assert line.startswith("samples: Energon keys are unique") and line.endswith(
        "(warn only: gate overrides)"
    )
    assert result.summary().startswith("passed with warnings: samples: Energon keys are unique")

    other = load_overrides(_overrides(tmp_path, {"other": {"expectations": {"samples.keys_unique": "off"}}}))
    assert not _gate(samples, media, built, overrides=other).passed  # only the named subset


@pytest.mark.parametrize(
    ("expectations", "message"),
    [
        (
            {"samples.nope": "off"},
            "subsets.odd.expectations: samples.nope: unknown expectation; known: samples.",
        ),
        ({"samples.keys_unique": "maybe"}, "samples.keys_unique: expected one of off, warn, got 'maybe'"),
        (["samples.keys_unique"], "subsets.odd.expectations: expected an object"),
    ],
)
def test_a_bad_expectation_override_is_a_config_error(
    expectations: Any, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="^.*" + message.replace(".", r"\.").replace("(", r"\(")):
        load_overrides(_overrides(tmp_path, {SUBSET: {"expectations": expectations}}))


def test_every_expectation_has_a_unique_name() -> None:
    for suite in SUITES:
        names = [e["meta"]["name"] for e in load_suite(suite)["expectations"]]
        assert len(names) == len(set(names)) and all(names), suite
    assert "samples.ok_ids_unique" in expectation_names() and "media.resized_at_least_min_pixels" in (
        expectation_names()
    )
