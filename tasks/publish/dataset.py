"""Write one Megatron-Energon WebDataset per subset: deterministic tars, Energon's index, a staged swap.

Layout of a published dataset ``dest`` (see docs/energon-format.md §1, §11)::

    dest/
    ├── train-<subset>-000000.tar (+ .tar.idx)     # uncompressed, deterministic GNU tars (:mod:`.tar`)
    ├── val-<subset>-000000.tar   (+ .tar.idx)     # only when the val split is non-empty
    ├── vlmforge-shards.json                      # [{shard, split, samples, bytes, sha256, tokens, keys}]
    └── .nv-meta/{.info.json, split.yaml, index.sqlite, index.uuid, dataset.yaml, dataset_psi<N>.yaml}
                                                  # + the format's extra configs (bridge: dataset_parts.yaml)

:func:`write_energon_dataset` is a pipeline of the steps that live in their own modules: each sample is
encoded by its sample format (:mod:`.formats`, default Bridge's ChatML) and prepared (:mod:`.members`),
split writers roll shards over and keep finished shards of an interrupted attempt (:mod:`.rolling`,
:mod:`.journal`), each finished shard goes into Energon's index as it closes and the rest of ``.nv-meta``
follows (:mod:`.prepare`, :mod:`.shard_index`), the index is re-read and checked,
the listing is written (:mod:`.listing`), and the staged folder is swapped into place (:mod:`.swap`).
Media may be given as bytes or as :class:`~.samples.MediaPart` (size + sha256 + a loader): the latter is
read only when its shard is written, so a resumed write skips finished shards without reading their media.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ...schemas.config import DEFAULT_SHARD_MAX_BYTES, DEFAULT_SHARD_MAX_SAMPLES
from ...schemas.sample_keys import SPLITS
from ...schemas.subset_names import subset_name_problem
from ..storage import no_space
from .formats import DEFAULT_FORMAT, get_format
from .formats.sample_format import SampleFormat
from .journal import Journal, Syncer, journal_header, open_staging
from .listing import write_listing
from .metadataset import write_dataset_configs
from .prepare import DatasetIndex, iter_indexed_keys, seal_index, write_info_and_splits
from .rolling import Done, ShardWriter
from .samples import DatasetResult, DuplicateKeyError, EnergonPrepareError, ShardInfo, ShardSample
from .splits import check_train_split
from .swap import recover_old, remove, staging_path, swap_into_place
from .tar_members import prepare_sample

__all__ = ["write_energon_dataset"]


def write_energon_dataset(
    samples: Iterable[ShardSample],
    dest: Path,
    *,
    subset: str,
    shard_max_bytes: int = DEFAULT_SHARD_MAX_BYTES,
    shard_max_samples: int = DEFAULT_SHARD_MAX_SAMPLES,
    fsync: bool = True,
    resume: bool = True,
    check: Callable[[Path], None] | None = None,
    sample_format: str = DEFAULT_FORMAT,
) -> DatasetResult:
    """Write ``samples`` as a prepared Energon dataset at ``dest`` (replacing it atomically).

    ``check(staging)`` runs on the complete staged folder before the swap (the ``shards`` quality suite);
    when it raises, the staging folder is removed and the published version stays as it was.

    ``fsync`` makes every shard durable before it is recorded as finished (and the publish rename after
    it); ``resume`` keeps the finished shards of an interrupted earlier call with the same ``subset``,
    limits and ``sample_format`` when the same samples arrive for them again (see :mod:`.journal`).

    Raises :class:`DuplicateKeyError` on a repeated key, :class:`ValueError` on an invalid sample or an
    empty input (an Energon dataset needs at least one shard), :class:`~.splits.EmptyTrainSplitError` when
    every sample is in the val split (nothing to train on), :class:`EnergonPrepareError` if Energon's
    prepare step fails or its counts disagree with what was written; after these the staging folder is
    removed. Any other exception (an I/O error, an interrupt) leaves it in place for the next call to resume.
    """
    fmt = get_format(sample_format)
    _check_arguments(subset, shard_max_bytes, shard_max_samples)
    dest = Path(dest)
    staging = staging_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    recover_old(dest)
    header = journal_header(subset, shard_max_bytes, shard_max_samples, fmt.name)
    journal = open_staging(staging, header, resume, fsync)
    try:
        done = _write_shards(
            samples, staging, subset, shard_max_bytes, shard_max_samples, journal, fmt, fsync
        )
        result = _index_and_check(staging, done, fmt)
        del done  # every written key (the listing holds them now): not through the check, the peak
    except (ValueError, TypeError, EnergonPrepareError):  # the same input would fail the same way again
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _run_check(check, staging)
    journal.path.unlink()
    swap_into_place(staging, dest, fsync=fsync)
    result.path = dest
    return result


def _check_arguments(subset: str, max_bytes: int, max_samples: int) -> None:
    problem = subset_name_problem(subset)
    if problem:  # the catalog refuses these before any work; a direct caller gets the same reason
        raise ValueError(problem)
    if max_samples < 1 or max_bytes < 1:
        raise ValueError("shard_max_samples and shard_max_bytes must be positive")


def _write_shards(
    samples: Iterable[ShardSample],
    root: Path,
    subset: str,
    max_bytes: int,
    max_samples: int,
    journal: Journal,
    fmt: SampleFormat,
    fsync: bool,
) -> list[Done]:
    """Every sample into its split's shards, each indexed as it closes; the finished shards in that order
    (their ids in the index)."""
    syncer = Syncer(journal, fsync)
    index = DatasetIndex(root, fsync)
    writers = {
        split: ShardWriter(root, split, subset, max_bytes, max_samples, journal, syncer, index.add)
        for split in SPLITS
    }
    seen: set[str] = set()
    counts = dict.fromkeys(SPLITS, 0)
    try:
        for sample in samples:
            prepared = prepare_sample(sample, fmt)
            if prepared.key in seen:
                raise DuplicateKeyError(f"duplicate sample key {prepared.key!r} in subset {subset!r}")
            seen.add(prepared.key)
            writers[sample.split].add(prepared)
            counts[sample.split] += 1
        for writer in writers.values():
            writer.close()
        syncer.drain()
        index.db.close()
    except BaseException as exc:
        for writer in writers.values():
            writer.abort()
        index.db.abort()
        # finished shards still become durable and recorded (the next call resumes from them); the
        # original error is the one to report
        with contextlib.suppress(Exception):
            syncer.drain()
        full = no_space(exc, str(root))
        if full is not None:
            raise full from exc
        raise
    if not seen:
        raise ValueError(f"subset {subset!r} has no samples; an Energon dataset needs at least one shard")
    check_train_split(subset, counts)
    return index.done


def _index_and_check(root: Path, done: list[Done], fmt: SampleFormat) -> DatasetResult:
    """The rest of ``.nv-meta`` over the finished shards (indexed as they finished, in that order), then what
    the index holds compared with what was written."""
    tar_names = [item.shard for item in done]
    # shards a longer interrupted attempt recorded (resume keeps recorded shards until here; everything else
    # it left, a .tar.idx among it, went when the staging folder was opened)
    for path in root.iterdir():
        if path.name.endswith(".tar") and path.name not in tar_names:
            remove(path)
    splits = {split: [d.shard for d in done if d.split == split] for split in SPLITS}
    write_info_and_splits(
        root, {item.shard: len(item.keys) for item in done}, {k: v for k, v in splits.items() if v}
    )
    seal_index(root, {item.shard: item.sha256 for item in done})
    write_dataset_configs(root / ".nv-meta", fmt)
    result = DatasetResult(path=root)
    listing: list[tuple[ShardInfo, list[str]]] = []
    for item, (_name, indexed) in zip(done, iter_indexed_keys(root, tar_names), strict=True):
        _check_shard(item, indexed)
        shard = ShardInfo(item.shard, item.split, len(item.keys), item.bytes, item.sha256, item.tokens)
        result.shards.append(shard)
        result.samples += shard.samples
        result.reused_shards += item.reused
        listing.append((shard, item.keys))
    write_listing(root, listing)
    return result


def _check_shard(item: Done, keys: list[str]) -> None:
    """The shard's samples as ``index.sqlite`` holds them (what a trainer's loader finds) are the written keys
    in order (``.info.json`` counts them from the written keys)."""
    if keys != item.keys:
        first = next((i for i, (a, b) in enumerate(zip(keys, item.keys, strict=False)) if a != b), len(keys))
        raise EnergonPrepareError(
            f"{item.shard}: index.sqlite holds {len(keys)} samples, {len(item.keys)} were written "
            f"(first difference at {first})"
        )


def _run_check(check: Callable[[Path], None] | None, staging: Path) -> None:
    if check is None:
        return
    try:
        check(staging)
    except Exception:  # the staged dataset is refused as a whole; the published one stays
        shutil.rmtree(staging, ignore_errors=True)
        raise
