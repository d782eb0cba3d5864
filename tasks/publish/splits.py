"""Empty splits, and what each means for a trainer.

Samples go to ``train`` or ``val`` by the key hash of :func:`~.keys.split_for_key` (Megatron-Bridge's
converters' rule). On a small subset the hash can leave a split empty:

- an empty **train** split (every ok sample hashed to val) fails the subset's publish
  (:class:`EmptyTrainSplitError`): nothing of it would be trained on, and Bridge's Nemotron converter refuses
  such a dataset too;
- an empty **val** split of one subset is normal for a small subset at a small fraction: the dataset is
  published train-only and the run notes it (:func:`val_split_note`);
- no val split in ANY published subset while ``--val-fraction`` asks for one leaves the run's
  ``metadataset.yaml`` without ``splits.val``. Energon then fails the first ``get_val_dataset`` with
  ``KeyError: 'val'``, which is what a Bridge recipe that validates calls; :func:`metadataset_val_problem`
  says so and how to fix it. With ``--val-fraction 0`` the output is train-only by choice (no warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from ...schemas.sample_keys import Split
from .metadataset import dataset_splits

__all__ = ["EmptyTrainSplitError", "check_train_split", "metadataset_val_problem", "val_split_note"]


class EmptyTrainSplitError(ValueError):
    """Every sample of a subset hashed to the val split: the dataset would have nothing to train on."""


def check_train_split(subset: str, counts: Mapping[Split, int]) -> None:
    """Raise :class:`EmptyTrainSplitError` when ``counts`` (samples per split) has samples, none in train."""
    total = sum(counts.values())
    if total and not counts.get("train"):
        raise EmptyTrainSplitError(
            f"subset {subset!r}: all {total} ok sample(s) hashed to the val split and none to train, so a "
            "trainer would get nothing of it (Megatron-Bridge's converters refuse this too); lower "
            "--val-fraction, or pass --val-fraction 0 for a train-only output"
        )


def val_split_note(dataset: Path, val_fraction: float) -> str | None:
    """A note for the subset's outcome when ``--val-fraction`` asked for a val split and the published
    ``dataset`` has none (too few samples for the fraction); None otherwise."""
    if val_fraction <= 0 or "val" in dataset_splits(dataset):
        return None
    return f"train only: no sample hashed to val at --val-fraction {val_fraction:g}"


def metadataset_val_problem(energon_root: Path, val_fraction: float) -> str | None:
    """What is wrong with ``energon_root/metadataset.yaml`` for a recipe that validates, or None.

    A problem only when ``val_fraction`` > 0 and the metadataset has no ``val`` split (no published subset
    got a val sample); a missing metadataset (nothing published) is not this function's business.
    """
    path = Path(energon_root) / "metadataset.yaml"
    if val_fraction <= 0 or not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if "val" in (doc.get("splits") or {}):
        return None
    return (
        f"{path} has no val split: no published subset has a sample that hashed to val at --val-fraction "
        f"{val_fraction:g} (too few samples for the fraction). A Megatron-Bridge recipe that validates fails "
        "on it (energon: KeyError 'val'). Raise --val-fraction until some subset gets val samples, or pass "
        "--val-fraction 0 for a train-only output and turn validation off in the recipe "
        "(EnergonDatasetConfig do_validation=False, or eval_iters=0)."
    )
