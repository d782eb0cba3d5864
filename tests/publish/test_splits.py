"""Empty splits (tasks/publish/splits.py): a subset whose every sample hashed to val is refused at publish
(the published version stays); a train-only subset at ``--val-fraction`` > 0 gets a note; a metadataset
without any val split at ``--val-fraction`` > 0 is reported with its fix, and Energon really fails a
validating loader on it. Real manifests, the real shard writer (Bridge's format) and real megatron-energon."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from megatron.energon import WorkerConfig, get_val_dataset
from published_fixture import SubsetSpec, build_out, write_manifests

from vlmforge.energon import ChatTaskEncoder
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.publish.listing import read_manifest
from vlmforge.tasks.publish.publish import publish_metadataset, publish_subset
from vlmforge.tasks.publish.splits import (
    EmptyTrainSplitError,
    check_train_split,
    metadataset_val_problem,
    val_split_note,
)


def _publish(out: str, name: str, sample_format: str = "bridge") -> None:
    publish_subset(
        OutputLayout(out), name, shard_max_bytes=10**9, shard_max_samples=4, sample_format=sample_format
    )


def test_a_subset_with_every_sample_in_val_is_refused_and_the_published_one_stays(tmp_path: Path) -> None:
    out = build_out(tmp_path, [SubsetSpec("tiny", 3)], sample_format="bridge")
    dataset = Path(OutputLayout(out).energon) / "tiny"
    before = {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()}
    assert {e["split"] for e in read_manifest(dataset)} == {"train"}

    write_manifests(out, SubsetSpec("tiny", 3, val_every=1))  # the rerun's split: all three in val
    with pytest.raises(EmptyTrainSplitError) as err:
        _publish(out, "tiny")
    message = str(err.value)
    assert "'tiny'" in message and "all 3 ok sample(s) hashed to the val split" in message
    assert "--val-fraction" in message
    assert {p.name: p.read_bytes() for p in dataset.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in dataset.parent.iterdir()) == ["metadataset.yaml", "tiny"]  # no staging left


def test_check_train_split_accepts_train_only_and_mixed_counts() -> None:
    check_train_split("s", {"train": 2, "val": 0})
    check_train_split("s", {"train": 1, "val": 5})
    with pytest.raises(EmptyTrainSplitError):
        check_train_split("s", {"train": 0, "val": 1})


def _val_loader_error(mds: Path) -> BaseException | None:
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    try:
        get_val_dataset(
            str(mds), split_part="val", worker_config=wc, batch_size=1, task_encoder=ChatTaskEncoder()
        )
    except Exception as exc:  # noqa: BLE001 - the error itself is what the test looks at
        return exc
    return None


def test_train_only_subsets_are_noted_and_a_metadataset_without_val_is_reported(tmp_path: Path) -> None:
    # The crude format: its loader (vlmforge's cooker) runs here; Bridge's needs megatron.bridge. The splits
    # and the metadataset are the same whatever the format.
    out = build_out(tmp_path, [SubsetSpec("alpha", 4), SubsetSpec("beta", 5)], sample_format="crude")
    energon = Path(OutputLayout(out).energon)
    mds = energon / "metadataset.yaml"

    note = val_split_note(energon / "alpha", 0.05)
    assert note is not None and "--val-fraction 0.05" in note
    assert val_split_note(energon / "alpha", 0.0) is None  # train-only by choice

    assert "val" not in yaml.safe_load(mds.read_text())["splits"]
    problem = metadataset_val_problem(energon, 0.05)
    assert problem is not None and "no val split" in problem
    assert "--val-fraction 0" in problem and "Raise --val-fraction" in problem
    assert metadataset_val_problem(energon, 0.0) is None
    # What the message warns of: a validating loader over this metadataset fails (Energon: KeyError 'val').
    error = _val_loader_error(mds)
    assert isinstance(error, KeyError) and error.args == ("val",), repr(error)

    # One subset with val samples gives the metadataset its val split: nothing to report, nothing to note.
    write_manifests(out, SubsetSpec("gamma", 4, val_every=2))
    _publish(out, "gamma", "crude")
    publish_metadataset(OutputLayout(out))
    assert metadataset_val_problem(energon, 0.05) is None
    assert val_split_note(energon / "gamma", 0.05) is None
    assert _val_loader_error(mds) is None
