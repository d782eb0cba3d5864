"""`vlmforge validate` and the publish glue against a real output folder: Parquet manifests written with the
manifest writer, media in the content store, datasets published by `publish_subset` (real megatron-energon
prepare), loaded back through real megatron-energon with the project's cooker and a real task encoder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from conftest import error_collecting_worker_config
from megatron.energon import DefaultTaskEncoder, get_loader, get_train_dataset, stateless
from published_fixture import SubsetSpec, build_out, write_manifests
from typer.testing import CliRunner

from vlmforge.energon import COOKERS, ChatSample
from vlmforge.flows.cli.energon import register
from vlmforge.schemas.sample_keys import sanitize_key
from vlmforge.tasks.manifests import OutputLayout, read_table, write_part
from vlmforge.tasks.publish.listing import MANIFEST_NAME, read_manifest
from vlmforge.tasks.publish.publish import publish_subset
from vlmforge.tasks.validate import format_reports, validate_blend, validate_output, validate_subset

W, H = 16, 12


SPECS = [
    SubsetSpec("alpha", 10, tokens=lambda i: 100 + i, images=2, val_every=4),
    SubsetSpec("beta", 6, tokens=lambda i: 300, images=1),
]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_out(tmp_path_factory.mktemp("validate") / "out", SPECS)


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_published_output_validates_fully(out: str) -> None:
    reports = validate_output(out)
    assert [r.subset for r in reports] == ["alpha", "beta"]
    assert all(r.ok for r in reports), format_reports(reports)
    alpha = reports[0]
    assert alpha.counts == {"train": 8, "val": 2} and alpha.expected_counts == alpha.counts
    assert alpha.media_parts[sanitize_key("alpha", "id.0")] == ["0.png", "1.png"]
    text = format_reports(reports)
    assert text.splitlines()[0].startswith("ok     alpha: train 8/8, val 2/2 samples read")
    assert text.splitlines()[-1] == "2 ok, 0 failed"
    # the shards column of every ok sample names the shard it was written to
    rows = read_table(OutputLayout(out), "samples", "alpha").to_pylist()
    listing = {k: e["shard"] for e in read_manifest(Path(out) / "energon" / "alpha") for k in e["keys"]}
    assert all(r["shard"] == listing[r["key"]] for r in rows)


def test_sample_mode_reads_the_first_samples(out: str) -> None:
    report = validate_subset(out, "alpha", sample_limit=3)
    assert report.ok, report.problems
    assert report.counts == {"train": 3, "val": 2}
    assert "(first 3 per split)" in format_reports([report])


def test_cli_validate_exit_codes(out: str, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(_app(), ["validate", out, "--subset", "beta", "--sample", "2"])
    assert ok.exit_code == 0, ok.output
    assert "ok     beta: train 2/6 samples read (first 2 per split)" in ok.output

    # a manifest that disagrees with the dataset: one sample's token count changed
    broken = str(tmp_path / "broken")
    build_out(Path(broken), [SPECS[1]])
    layout = OutputLayout(broken)
    rows = read_table(layout, "samples", "beta").to_pylist()
    rows[2]["total_tokens"] += 1
    write_part(layout, "samples", "beta", 0, rows)
    bad = runner.invoke(_app(), ["validate", broken])
    assert bad.exit_code == 1
    key = sanitize_key("beta", "id.2")
    assert "FAILED beta" in bad.output
    assert f"{key}: vlmforge.total_tokens is 300, expected 301" in bad.output
    assert bad.output.rstrip().endswith("0 ok, 1 failed")


def test_detects_damaged_missing_and_extra_shards(tmp_path: Path) -> None:
    out = build_out(tmp_path / "out", [SPECS[1]], shard_max_samples=2)
    dataset = Path(out) / "energon" / "beta"
    assert validate_subset(out, "beta").ok
    tars = sorted(dataset.glob("*.tar"))
    assert len(tars) == 3

    # flip one byte inside the first sample's PNG data: same size, other sha256, a decode error at load
    data = bytearray(tars[0].read_bytes())
    png_at = data.index(b"IDAT")
    data[png_at + 8] ^= 0xFF
    tars[0].write_bytes(bytes(data))
    report = validate_subset(out, "beta")
    assert not report.ok
    text = "\n".join(report.problems)
    assert f"{tars[0].name}: sha256 differs from the manifest" in text
    assert "sample errors while loading" in text and sanitize_key("beta", "id.0") in text
    # without checksums (sample mode) the size still matches: only the load error remains
    sampled = validate_subset(out, "beta", sample_limit=1)
    assert not any("sha256" in p for p in sampled.problems)

    tars[1].unlink()
    (dataset / "train-beta-000009.tar").write_bytes(b"")
    text = "\n".join(validate_subset(out, "beta").problems)
    assert f"1 shards in the manifest are missing on disk: {tars[1].name}" in text
    assert "1 tar files are not in the shards manifest: train-beta-000009.tar" in text
    assert "loading failed" in text


def test_blend_checks(out: str, tmp_path: Path) -> None:
    root = Path(out) / "energon"
    assert validate_blend(root / "metadataset.yaml") == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n  train:\n    blend:\n"
        f"      - {{weight: 1, path: {root / 'beta'}, split_part: val}}\n"
        f"      - {{weight: 1, path: {root / 'alpha'}, dataset_config: nope.yaml}}\n"
        f"      - {{weight: 1, path: {tmp_path / 'nowhere'}}}\n"
    )
    problems = validate_blend(bad)
    assert len(problems) == 3
    assert "has no 'val' split" in problems[0]
    assert "lacks .nv-meta/nope.yaml" in problems[1]
    assert "is not a prepared dataset" in problems[2]


def test_cross_batch_duplicate_key_is_a_reject(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    spec = SubsetSpec("dup", 6, images=1, batch_lines=3)
    # lines 2 and 5 (different batches) sanitise to the same key
    write_manifests(out, spec, key_of=lambda i: sanitize_key("dup", "same" if i in (1, 4) else f"id.{i}"))
    layout = OutputLayout(out)
    result = publish_subset(layout, "dup", shard_max_bytes=10**9, shard_max_samples=10)
    assert result.samples == 5 and result.duplicates == 1
    rows = {r["line"]: r for r in read_table(layout, "samples", "dup").to_pylist()}
    assert rows[5]["status"] == "rejected"
    assert rows[5]["reason"] == "duplicate_key: dup__same already used by line 2"
    assert rows[5]["key"] is None and rows[5]["shard"] is None
    assert rows[2]["status"] == "ok" and rows[2]["shard"]
    report = validate_subset(out, "dup")
    assert report.ok, report.problems
    # a second publish (resume of a rerun) keeps the reject and writes the same bytes
    before = (Path(out) / "energon" / "dup" / MANIFEST_NAME).read_bytes()
    again = publish_subset(layout, "dup", shard_max_bytes=10**9, shard_max_samples=10)
    assert again.duplicates == 0 and again.samples == 5
    assert (Path(out) / "energon" / "dup" / MANIFEST_NAME).read_bytes() == before


@dataclass
class Encoded:
    key: str
    source: str
    pixels: torch.Tensor  # the sample's images stacked (n, 3, H, W)
    tokens: int


class StackingEncoder(DefaultTaskEncoder[ChatSample, Encoded, list[Encoded], dict[str, Any]]):
    """A task encoder as a training run would write one: cook, encode each sample, batch into tensors."""

    cookers = COOKERS

    @stateless
    def encode_sample(self, sample: ChatSample) -> Encoded:
        return Encoded(
            key=sample.__key__,
            source=(sample.__subflavors__ or {})["source"],
            pixels=torch.stack(sample.images),
            tokens=sample.record["vlmforge"]["total_tokens"],
        )

    @stateless
    def batch(self, samples: list[Encoded]) -> list[Encoded]:
        return samples

    @stateless
    def encode_batch(self, batch: list[Encoded]) -> dict[str, Any]:
        return {
            "keys": [s.key for s in batch],
            "sources": [s.source for s in batch],
            "pixels": torch.cat([s.pixels for s in batch]),
            "tokens": torch.tensor([s.tokens for s in batch]),
        }


@pytest.mark.parametrize("num_workers", [0, 2])
def test_task_encoder_over_the_metadataset(out: str, num_workers: int) -> None:
    worker_config, errors = error_collecting_worker_config(num_workers)
    dataset = get_train_dataset(
        str(Path(out) / "energon" / "metadataset.yaml"),
        worker_config=worker_config,
        batch_size=3,
        shuffle_buffer_size=10,
        max_samples_per_sequence=4,
        task_encoder=StackingEncoder(),
    )
    expected = {
        r["key"]: r
        for spec in SPECS
        for r in read_table(OutputLayout(out), "samples", spec.name).to_pylist()
        if r["split"] == "train"
    }
    seen: set[str] = set()
    for batch, _ in zip(get_loader(dataset), range(20), strict=False):
        assert len(batch["keys"]) == 3
        images = sum(expected[k]["n_images"] for k in batch["keys"])
        assert batch["pixels"].shape == (images, 3, H, W) and batch["pixels"].dtype == torch.float32
        assert batch["tokens"].tolist() == [expected[k]["total_tokens"] for k in batch["keys"]]
        assert batch["sources"] == [expected[k]["subset"] for k in batch["keys"]]
        seen.update(batch["keys"])
    assert not errors
    assert seen == set(expected)


def test_a_manifest_that_disagrees_on_parts_or_shard_fails(tmp_path: Path) -> None:
    """The manifests are read column by column (no row objects: ~0.3 GB at 200,000 rows before); what they
    promise is still compared with what was published: a sample's media parts and the shard of every key."""
    out = build_out(tmp_path / "out", [SPECS[0]])
    layout = OutputLayout(out)
    assert validate_subset(out, "alpha").ok
    media = read_table(layout, "media", "alpha").to_pylist()
    second = next(row for row in media if row["line"] == 1 and row["index"] == 1)  # lines count from 1
    second["out_ext"] = "jpg"  # the manifest now promises 1.jpg where 1.png was published
    write_part(layout, "media", "alpha", 0, media)
    samples = read_table(layout, "samples", "alpha").to_pylist()
    moved = next(row for row in samples if row["line"] == 3)
    moved["shard"] = "train-alpha-000099.tar"
    write_part(layout, "samples", "alpha", 0, samples)
    text = "\n".join(validate_subset(out, "alpha").problems)
    assert f"{sanitize_key('alpha', 'id.0')} has ['0.png', '1.png'], expected ['0.png', '1.jpg']" in text
    assert "1 samples with other media parts" in text
    assert "1 ok samples whose shard differs from the written one" in text
    assert f"{sanitize_key('alpha', 'id.2')} (samples.shard='train-alpha-000099.tar', written to" in text


@pytest.mark.parametrize("scanned", [0, 3, 1000], ids=["dict at once", "dict after 3 scans", "scans only"])
def test_the_read_back_finds_each_samples_promise_however_keys_are_looked_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanned: int
) -> None:
    """A few keys are looked up by scanning the key column, a full read-back through a dict built once
    (``_SCANNED_LOOKUPS``): either way each sample is compared with its own row of the manifest."""
    import vlmforge.tasks.validate.dataset_check as validate

    monkeypatch.setattr(validate, "_SCANNED_LOOKUPS", scanned)
    out = build_out(tmp_path / "out", [SPECS[0]])
    layout = OutputLayout(out)
    samples = read_table(layout, "samples", "alpha").to_pylist()
    changed = [row for row in samples if row["line"] in (2, 9)]  # one read early, one late (train split)
    for row in changed:
        row["total_tokens"] += 1
    write_part(layout, "samples", "alpha", 0, samples)
    report = validate_subset(out, "alpha")
    text = "\n".join(report.problems)
    assert "2 json fields differ from the manifest" in text
    assert "with other media parts" not in text  # each sample's parts found through the same lookups
    for row in changed:
        want = row["total_tokens"]
        assert f"{row['key']}: vlmforge.total_tokens is {want - 1}, expected {want}" in text
    assert report.counts == {"train": 8, "val": 2}


def test_a_listing_with_a_key_that_is_not_a_string_is_reported_not_raised(tmp_path: Path) -> None:
    """The read-back compares the listing's keys as Arrow columns: a hand-edited listing whose key is a
    number is a finding about that sample, not a crash of the validator."""
    out = build_out(tmp_path / "out", [SPECS[1]])
    dataset = Path(OutputLayout(out).energon) / "beta"
    listing = read_manifest(dataset)
    lost = listing[0]["keys"][0]
    listing[0]["keys"][0] = 7
    (dataset / MANIFEST_NAME).write_text(json.dumps(listing), encoding="utf-8")
    text = "\n".join(validate_subset(out, "beta").problems)
    assert f"1 ok samples whose shard differs from the written one: {lost} (samples.shard=" in text
    assert "written to None" in text


@pytest.mark.parametrize("scanned", [0, 1000], ids=["dict", "scans"])
def test_text_only_samples_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanned: int) -> None:
    """A sample with no media has no row in the ``media`` table: the read-back expects no parts for it
    (a text-only subset, the commonest kind in the release, once failed every read-back here)."""
    import vlmforge.tasks.validate.dataset_check as validate

    monkeypatch.setattr(validate, "_SCANNED_LOOKUPS", scanned)
    out = build_out(tmp_path / "out", [SubsetSpec("gamma", 5, images=0, val_every=5)])
    report = validate_subset(out, "gamma")
    assert report.ok, report.problems
    assert report.counts == {"train": 4, "val": 1}
    assert set(map(len, report.media_parts.values())) == {0}
