"""The yaml files a loader reads: a dataset's ``.nv-meta/dataset.yaml`` (with its ``parallel_shard_iters``
variants) and the MetadatasetV2 ``metadataset.yaml`` over a run's datasets.

``dataset_psi<N>.yaml`` (N = 1, 2, 4, 8) are ``dataset.yaml`` plus ``parallel_shard_iters: N``: a blend of
many subsets picks one per leaf (``dataset_config:``) so a loader worker keeps few tar handles open per
subset (docs/energon-format.md §8, issue #81; see :mod:`vlmforge.tasks.ops.mix`). The metadataset lists a
subset under ``val`` (or ``train``) only if its ``split.yaml`` has that split: Energon cannot load an empty
or missing split.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import yaml
from fsspec import AbstractFileSystem

from ...schemas.sample_keys import SPLITS
from ..storage import atomic_write_bytes, atomic_write_text, read_text
from .formats.sample_format import SampleFormat

__all__ = [
    "PSI_CONFIGS",
    "dataset_splits",
    "ensure_dataset_config",
    "write_dataset_configs",
    "write_metadataset",
]

#: ``parallel_shard_iters`` values with a ready ``.nv-meta/dataset_psi<N>.yaml`` in every dataset.
PSI_CONFIGS = (1, 2, 4, 8)


def _with_psi(dataset_yaml: str, parallel_shard_iters: int) -> str:
    return dataset_yaml + f"parallel_shard_iters: {parallel_shard_iters}\n"


def write_dataset_configs(meta: Path, fmt: SampleFormat) -> None:
    """``dataset.yaml`` of ``fmt``, its :data:`PSI_CONFIGS` variants and the format's extra configs, into a
    staged ``.nv-meta``."""
    (meta / "dataset.yaml").write_text(fmt.dataset_yaml, encoding="utf-8")
    for psi in PSI_CONFIGS:
        (meta / f"dataset_psi{psi}.yaml").write_text(_with_psi(fmt.dataset_yaml, psi), encoding="utf-8")
    for name, text in sorted(fmt.extra_configs.items()):  # e.g. the config of the format's own read-back
        (meta / name).write_text(text, encoding="utf-8")


def ensure_dataset_config(
    dataset: Path | str, parallel_shard_iters: int, fs: AbstractFileSystem | None = None
) -> str | None:
    """The ``dataset_config`` name that loads ``dataset`` (a folder, or the path of one on ``fs``) with at
    most ``parallel_shard_iters`` open shards per loader worker (None for Energon's default of 16: plain
    ``dataset.yaml``).

    Datasets written by the shard writer ship ``dataset_psi{1,2,4,8}.yaml``; any other value (or one such
    file missing) is written on demand from the dataset's own ``dataset.yaml`` (atomically, through ``fs``;
    the content depends only on the value).
    """
    if parallel_shard_iters < 1:
        raise ValueError("parallel_shard_iters must be positive")
    if parallel_shard_iters >= 16:
        return None
    fs = fs or fsspec.filesystem("file")
    meta = f"{dataset}/.nv-meta"
    name = f"dataset_psi{parallel_shard_iters}.yaml"
    text = _with_psi(read_text(f"{meta}/dataset.yaml", fs), parallel_shard_iters)
    try:
        current: str | None = read_text(f"{meta}/{name}", fs)
    except FileNotFoundError:
        current = None
    if current != text:
        atomic_write_bytes(fs, f"{meta}/{name}", text.encode())
    return name


def dataset_splits(dataset: Path | str, fs: AbstractFileSystem | None = None) -> set[str]:
    """Splits with at least one shard in ``.nv-meta/split.yaml`` of ``dataset`` (a folder, or the path of
    one on ``fs``)."""
    data = yaml.safe_load(read_text(f"{dataset}/.nv-meta/split.yaml", fs)) or {}
    parts = data.get("split_parts") or {}
    return {split for split, shards in parts.items() if shards}


def _iter_blend(energon_root: Path, subsets: dict[str, float], split: str) -> Iterator[dict[str, Any]]:
    for subset in sorted(subsets):
        if split in dataset_splits(energon_root / subset):
            weight = subsets[subset]
            entry: dict[str, Any] = {"weight": weight} if split == "train" else {}
            entry["path"] = f"./{subset}"
            entry["subflavors"] = {"source": subset}
            yield entry


def _check_blend_inputs(energon_root: Path, subsets: dict[str, float]) -> None:
    if not subsets:
        raise ValueError("no subsets for the metadataset")
    for subset, weight in subsets.items():
        if not (energon_root / subset / ".nv-meta" / "split.yaml").is_file():
            raise FileNotFoundError(f"{energon_root / subset} is not a prepared Energon dataset")
        if not weight > 0:
            raise ValueError(f"subset {subset!r}: weight must be positive, got {weight!r}")


def write_metadataset(energon_root: Path, subsets: dict[str, float]) -> Path:
    """Write ``energon_root/metadataset.yaml`` (MetadatasetV2) over the per-subset datasets, atomically.

    ``splits.train.blend`` has one entry per subset (weight, ``./<subset>``,
    ``subflavors: {source: <subset>}``); ``splits.val.blend`` lists only subsets whose ``split.yaml`` has a
    non-empty val split (val blends are concatenated by Energon, so weights are omitted there); with no
    such subset there is no ``val`` split at all (see :mod:`.splits` for what that means to a recipe). A
    subset without a train split is left out of the train blend, since Energon cannot load an empty split
    (the shard writer refuses to publish one: :class:`~.splits.EmptyTrainSplitError`). Entries are sorted
    by subset name; the text is deterministic.
    """
    energon_root = Path(energon_root)
    _check_blend_inputs(energon_root, subsets)
    splits: dict[str, Any] = {}
    for split in SPLITS:
        blend = list(_iter_blend(energon_root, subsets, split))
        if blend:
            splits[split] = {"blend": blend}
    if "train" not in splits:
        raise ValueError("no subset has a train split")
    doc = {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": splits}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    target = energon_root / "metadataset.yaml"
    atomic_write_text(target, text)
    return target
