"""Read a written dataset back as a trainer would: through megatron-energon and the project's cooker.

:func:`validate_energon_dataset` checks one dataset folder against expected keys (split -> keys in write
order), optionally expected media parts and token counts per key:

* the ``.nv-meta`` index is consistent (:mod:`.index_check`) and the ``.info.json`` total of each split
  equals the number of expected keys;
* iterating ``get_val_dataset`` with the reader of the dataset's format (``ChatTaskEncoder`` for crude;
  for bridge our own parts reader, :mod:`vlmforge.tasks.publish.formats.chatml_read`, no megatron.bridge
  needed) yields exactly the expected keys (in order when ``num_workers <= 1``), each as a
  :class:`~vlmforge.energon.ChatSample` with the expected media parts and the expected ``vlmforge`` block in
  its json part, with no sample-level errors (collected through a ``global_error_handler`` that also works
  inside worker processes);
* every media part of the samples read decodes as a trainer decodes it (:mod:`.media_check`: Pillow's full
  load of an image, PyAV's decode of a video's sampled frames; the media stage's own definition).

An expected split with no keys must be absent from ``split.yaml`` (vlmforge omits empty splits; see
:mod:`vlmforge.tasks.publish.prepare`).
"""

from __future__ import annotations

import gc
import json
import tempfile
import threading
import warnings
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..publish import format_of_dataset
from .check_report import ValidationReport, listed
from .index_check import check_index
from .media_check import media_problems

__all__ = ["validate_energon_dataset"]

# energon's loader asks torch to pin memory; on a machine without an accelerator torch warns on every read
# (a line of noise in every run's log and `vlmforge validate`): nothing is pinned, nothing is wrong.
warnings.filterwarnings(
    "ignore", message="'pin_memory' argument is set as true but no accelerator", category=UserWarning
)


class _ErrorLog:
    """Picklable ``global_error_handler``: one JSON line per error in a file (works across workers)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __call__(self, exc: Exception, sample: Any, sources: Any = None) -> None:
        message = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            message += f" (caused by {type(cause).__name__}: {cause})"
        entry = {"error": message, "key": _sample_key(sample)}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def read(self) -> list[dict[str, str]]:
        path = Path(self.path)
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _sample_key(sample: Any, depth: int = 0) -> str | None:
    """Best-effort key of what energon hands the error handler (dict, Sample, RawSampleData, batch)."""
    if depth > 3 or sample is None:
        return None
    if isinstance(sample, dict):
        key = sample.get("__key__")
        return key if isinstance(key, str) else None
    key = getattr(sample, "__key__", None)
    if isinstance(key, str):
        return key
    inner = getattr(sample, "data", None)
    if inner is not None:
        return _sample_key(inner, depth + 1)
    if isinstance(sample, list | tuple):
        keys = [k for item in sample if (k := _sample_key(item, depth + 1))]
        return ",".join(keys) if keys else None
    return None


class _SampleChecks:
    """Per-sample comparison of cooked samples with expected parts and ``vlmforge`` json fields."""

    def __init__(
        self,
        parts: Mapping[str, list[str]] | None,
        fields: Mapping[str, dict[str, Any]] | None,
    ) -> None:
        self.parts, self.fields = parts, fields
        self.part_mismatch: list[str] = []
        self.field_mismatch: list[str] = []

    def __call__(self, sample: Any) -> None:
        key = sample.__key__
        if self.parts is not None and key in self.parts and list(sample.parts) != self.parts[key]:
            self.part_mismatch.append(f"{key} has {sample.parts}, expected {self.parts[key]}")
        if self.fields is not None and key in self.fields:
            meta = sample.record.get("vlmforge") if isinstance(sample.record, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            for name, want in self.fields[key].items():
                if meta.get(name) != want:
                    self.field_mismatch.append(
                        f"{key}: vlmforge.{name} is {meta.get(name)!r}, expected {want!r}"
                    )

    def report(self, report: ValidationReport) -> None:
        if self.part_mismatch:
            report.add(
                f"{len(self.part_mismatch)} samples with other media parts: {listed(self.part_mismatch)}"
            )
        if self.field_mismatch:
            report.add(
                f"{len(self.field_mismatch)} json fields differ from the manifest: "
                f"{listed(self.field_mismatch)}"
            )


@dataclass
class _Reading:
    """What every split of one validation shares."""

    path: Path
    report: ValidationReport
    error_log: _ErrorLog
    sample_limit: int | None
    num_workers: int
    on_sample: Callable[[Any], None]


def validate_energon_dataset(
    path: Path,
    expected: Mapping[str, Sequence[str]],
    *,
    sample_limit: int | None = None,
    num_workers: int = 0,
    expected_parts: Mapping[str, list[str]] | None = None,
    expected_fields: Mapping[str, dict[str, Any]] | None = None,
) -> ValidationReport:
    """Load ``path`` with megatron-energon and compare it with ``expected`` (split -> keys in write order).

    ``sample_limit`` reads at most that many samples per split; then only that many keys are required, and
    with ``num_workers <= 1`` (read order = write order) they must be the first ``sample_limit`` expected.
    ``expected_parts`` (key -> media part names in numeric order) and ``expected_fields`` (key -> values of
    the json part's ``vlmforge`` block, e.g. ``{"total_tokens": 812}``) are checked for every sample read.
    """
    path = Path(path)
    report = ValidationReport(path=path, sample_limit=sample_limit)
    if not (path / ".nv-meta").is_dir():
        report.add(f"{path} is not a prepared Energon dataset (no .nv-meta folder)")
        return report
    shard_counts, split_parts = check_index(path, report)
    checks = _SampleChecks(expected_parts, expected_fields)
    for split in sorted(set(split_parts) - set(expected)):
        report.add(f"unexpected split {split!r} in split.yaml")
    with tempfile.TemporaryDirectory(prefix="vlmforge-validate-") as tmp:
        reading = _Reading(
            path, report, _ErrorLog(Path(tmp) / "errors.jsonl"), sample_limit, num_workers, checks
        )
        for split in sorted(expected):
            want = expected[split]
            report.expected_counts[split] = len(want)
            shards = split_parts.get(split, [])
            indexed = sum(shard_counts.get(shard, 0) for shard in shards)
            report.counts[split] = _validate_split(reading, split, want, shards, indexed)
        report.errors += [f"{entry['key']}: {entry['error']}" for entry in reading.error_log.read()]
    checks.report(report)
    if report.errors:
        report.add(f"{len(report.errors)} sample errors while loading: {listed(report.errors)}")
    return report


def _validate_split(
    reading: _Reading, split: str, want: Sequence[str], shards: list[str], indexed: int
) -> int:
    """Check one split (its shards listed in ``split.yaml``, ``indexed`` samples in ``.info.json``) and read
    it back; returns the samples read."""
    report = reading.report
    if not want:
        if shards:
            report.add(f"split {split!r}: expected no samples but split.yaml lists {len(shards)} shards")
        return 0
    if not shards:
        report.add(f"split {split!r}: {len(want)} samples expected but split.yaml has no shards for it")
        return 0
    if indexed != len(want):
        report.add(f"split {split!r}: .info.json counts {indexed} samples, expected {len(want)}")
    keys = _read_split(reading, split)
    _compare(split, keys, want, report, reading.sample_limit, ordered=reading.num_workers <= 1)
    broken = media_problems(reading.path, shards, set(keys))
    if broken:
        report.add(
            f"split {split!r}: {len(broken)} media parts do not decode as a trainer decodes them: "
            f"{listed(broken)}"
        )
    return len(keys)


#: Held while a loader reads. Energon keeps the active ``WorkerConfig`` of a loader in a class variable (one
#: per process: a second loader in another thread fails its assertion, and a read-back saw 9 of 10 samples);
#: a Ray worker reads one dataset at a time anyway, the local executor's threads take turns here. The
#: collector's freeze below is process-wide too.
_LOADER_LOCK = threading.Lock()


@contextmanager
def _gc_frozen() -> Iterator[None]:
    """The process's objects out of the collector's reach while the loader reads. Energon's loader collects
    every 10 samples and freezes the heap first only in its worker processes (``gc_freeze_at_start``);
    read in-process (``num_workers=0``) inside a Ray worker that holds Great Expectations and torch, each
    collection walked that whole heap: ~47% of a small subset's read-back."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _read_split(reading: _Reading, split: str) -> list[str]:
    """Keys of the cooked samples of ``split`` in read order (media parts recorded in the report)."""
    from megatron.energon import WorkerConfig

    worker_config = WorkerConfig(
        rank=0, world_size=1, num_workers=reading.num_workers, global_error_handler=reading.error_log
    )
    keys: list[str] = []
    with _LOADER_LOCK:
        _load_split(reading, split, worker_config, keys)
    return keys


def _load_split(reading: _Reading, split: str, worker_config: Any, keys: list[str]) -> None:
    """:func:`_read_split`'s loading, its keys added to ``keys``."""
    from megatron.energon import get_loader, get_val_dataset

    from ...energon import ChatSample

    report, limit = reading.report, reading.sample_limit
    try:
        # each format names its own reader: the bridge format is read without megatron.bridge installed
        fmt = format_of_dataset(reading.path)
        dataset = get_val_dataset(
            str(reading.path),
            split_part=split,
            worker_config=worker_config,
            batch_size=None,  # unbatched
            limit=limit,
            task_encoder=fmt.read_encoder(),
            dataset_config=fmt.read_config,
        )
        with _gc_frozen():
            for item in get_loader(dataset):
                for sample in item if isinstance(item, list) else [item]:
                    if not isinstance(sample, ChatSample):
                        report.add(f"split {split!r}: loader yielded {type(sample).__name__}, not ChatSample")
                        continue
                    keys.append(sample.__key__)
                    report.media_parts[sample.__key__] = list(sample.parts)
                    reading.on_sample(sample)
                if limit is not None and len(keys) >= limit:
                    break
    except Exception as exc:  # loader-level failure (missing split, unreadable shard, fatal sample errors)
        report.add(f"split {split!r}: loading failed: {type(exc).__name__}: {exc}")


def _compare(
    split: str,
    keys: list[str],
    want: Sequence[str],
    report: ValidationReport,
    sample_limit: int | None,
    *,
    ordered: bool,
) -> None:
    seen: set[str] = set()
    repeated: set[str] = set()
    for key in keys:
        (repeated if key in seen else seen).add(key)
    if repeated:
        report.add(f"split {split!r}: keys read more than once: {listed(sorted(repeated))}")
    # a limited read looks its few keys up in ``want`` itself (an Arrow column for a run's manifests)
    want_keys: Container[str] = set(want) if sample_limit is None else want
    unexpected = [key for key in keys if key not in want_keys]
    if unexpected:
        report.add(f"split {split!r}: {len(unexpected)} unexpected keys: {listed(unexpected)}")
    if sample_limit is None:
        missing = [key for key in want if key not in seen]
        if missing:
            report.add(f"split {split!r}: {len(missing)} missing keys: {listed(missing)}")
        elif ordered and keys != list(want):
            report.add(f"split {split!r}: keys read in a different order than written")
    else:
        target = min(sample_limit, len(want))
        if len(keys) != target:
            report.add(f"split {split!r}: read {len(keys)} samples, expected {target} (limit {sample_limit})")
        if ordered and keys != want[: len(keys)]:
            report.add(f"split {split!r}: keys read differ from the first {len(keys)} written")
