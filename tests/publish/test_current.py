"""The record that lets a rerun leave an unchanged subset as it is (tasks/publish/current.py): it vouches for
a published dataset only under the same inputs, options and code, and only while that dataset is the one it
recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import PublishWork
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.publish import current_publish, forget_current, publish_fingerprint, record_current


def _entry(**kw: Any) -> SubsetEntry:
    base: dict[str, Any] = dict(
        subset="photo_vqa",
        path="/r/photo_vqa",
        jsonl="/r/photo_vqa/photo_vqa.jsonl",
        readme_sha256="a" * 64,
        jsonl_sha256="b" * 64,
        jsonl_bytes=10,
        rows=2,
        license="CC-BY-4.0",
        license_text=None,
        batch_offsets=(0, 5, 10),
    )
    return SubsetEntry(**(base | kw))


def _cfg(tmp_path: Path, **kw: Any) -> RunConfig:
    return RunConfig.of(release="/r", out=str(tmp_path / "out"), **kw)


def _published(tmp_path: Path, listing: bytes = b'[{"shard": "shard_000000.tar"}]') -> OutputLayout:
    dataset = tmp_path / "out" / "energon" / "photo_vqa"
    dataset.mkdir(parents=True, exist_ok=True)
    (dataset / "vlmforge-shards.json").write_bytes(listing)
    return OutputLayout(str(tmp_path / "out"))


@pytest.mark.parametrize(
    "change",
    [
        {"entry": {"readme_sha256": "c" * 64}},  # the README (a licence line below the first, ...)
        {"entry": {"jsonl_sha256": "c" * 64}},
        {"entry": {"license": "CC-BY-NC-4.0"}},
        {"entry": {"media_recipe_sha256": "d" * 16}},
        {"entry": {"batch_offsets": (0, 10)}},
        {"cfg": {"max_pixels": 500_000}},  # an option of the batches
        {"cfg": {"shard_max_samples": 3}},  # an option of publish only
        {"cfg": {"max_reject_rate": 0.9}},  # an option of the gate only
        {"cfg": {"skip_gate": True}},
    ],
    ids=lambda c: next(iter(next(iter(c.values())))),
)
def test_the_fingerprint_moves_with_every_input_and_option_of_gate_and_publish(
    tmp_path: Path, change: dict[str, dict[str, Any]]
) -> None:
    before = publish_fingerprint(_entry(), PublishWork.of(_cfg(tmp_path)))
    after = publish_fingerprint(
        _entry(**change.get("entry", {})), PublishWork.of(_cfg(tmp_path, **change.get("cfg", {})))
    )
    assert after != before


def test_options_that_change_neither_keep_the_fingerprint(tmp_path: Path) -> None:
    before = publish_fingerprint(_entry(), PublishWork.of(_cfg(tmp_path)))
    same = _cfg(tmp_path, fetch_concurrency=3, num_cpus=7, executor="local", license_allow=("CC-*",))
    assert (
        publish_fingerprint(_entry(release="/elsewhere", path="/x/photo_vqa"), PublishWork.of(same)) == before
    )


def test_a_gate_overrides_file_is_part_of_the_fingerprint(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.json"
    overrides.write_text(json.dumps({"subsets": {"photo_vqa": {"max_reject_rate": 0.2}}}))
    cfg = _cfg(tmp_path, gate_overrides=str(overrides))
    before = publish_fingerprint(_entry(), PublishWork.of(cfg))
    overrides.write_text(json.dumps({"subsets": {"photo_vqa": {"max_reject_rate": 0.3}}}))  # same path
    assert publish_fingerprint(_entry(), PublishWork.of(cfg)) != before


def test_a_record_vouches_for_the_dataset_it_recorded_only(tmp_path: Path) -> None:
    layout = _published(tmp_path)
    fp = publish_fingerprint(_entry(), PublishWork.of(_cfg(tmp_path)))
    assert current_publish(layout, "photo_vqa", fp) is None  # never recorded
    record_current(layout, "photo_vqa", fp, run_id="r1", gate="passed", shards=1, validated=False)
    record = current_publish(layout, "photo_vqa", fp)
    assert record is not None and (record.run_id, record.gate, record.validated) == ("r1", "passed", False)
    record_current(layout, "photo_vqa", fp, run_id="r1", gate="passed", shards=1, validated=True)
    assert current_publish(layout, "photo_vqa", fp).validated  # type: ignore[union-attr]
    assert current_publish(layout, "photo_vqa", "another") is None  # other inputs or options

    _published(tmp_path, b"[]")  # the dataset was replaced since
    assert current_publish(layout, "photo_vqa", fp) is None
    _published(tmp_path)
    assert current_publish(layout, "photo_vqa", fp) is not None
    (tmp_path / "out" / "energon" / "photo_vqa" / "vlmforge-shards.json").unlink()  # unpublished
    assert current_publish(layout, "photo_vqa", fp) is None

    _published(tmp_path)
    forget_current(layout, "photo_vqa")  # about to be gated again
    assert current_publish(layout, "photo_vqa", fp) is None
    forget_current(layout, "photo_vqa")  # nothing to forget: no error


def test_nothing_is_recorded_for_a_subset_without_a_dataset(tmp_path: Path) -> None:
    layout = OutputLayout(str(tmp_path / "out"))
    record_current(layout, "photo_vqa", "fp", run_id="r1", gate="passed", shards=0, validated=True)
    assert not (tmp_path / "out" / "runs" / "current" / "photo_vqa.json").exists()
