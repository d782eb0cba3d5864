"""What a run's summary calls failed: a subset held back, and a published one that the trainer's loader did
not read back as the manifests promise (`vlmforge run` exits 1 on either)."""

from __future__ import annotations

from vlmforge.flows.summary import RunSummary, SubsetOutcome
from vlmforge.tasks.batch.stats import BatchStats


def _outcome(subset: str, *, published: bool, validation: str) -> SubsetOutcome:
    return SubsetOutcome(subset, "CC-BY-4.0", BatchStats(), published=published, validation=validation)


def test_a_published_subset_that_reads_back_wrong_is_unreadable_not_silently_ok() -> None:
    summary = RunSummary("r1", "/out")
    summary.subsets = [
        _outcome("good", published=True, validation="ok"),
        _outcome("held", published=False, validation="not run"),
        _outcome("wrong", published=True, validation="failed: split 'train': read 1 samples, expected 64"),
        _outcome("unchecked", published=True, validation="not run"),
    ]
    assert summary.failed == ["held"]
    assert summary.unreadable == ["wrong"]
    assert summary.to_dict()["unreadable"] == ["wrong"]
