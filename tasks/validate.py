"""Validate a written Energon dataset by loading it back through megatron-energon.

Checks, per split in ``expected`` (and per split found in ``.nv-meta/split.yaml``):

* every ``<shard>.tar.idx`` holds ``count + 1`` uint64 offsets for the ``.info.json`` count of its shard, and
  ``index.sqlite`` has the same number of rows per shard;
* the ``.info.json`` total of the split equals the number of expected keys;
* iterating ``get_val_dataset(... task_encoder=ChatTaskEncoder())`` yields exactly the expected keys (in
  order when ``num_workers <= 1``), each as a :class:`~vlmforge.energon.ChatSample`, with no sample-level
  errors (collected through a ``global_error_handler`` that also works inside worker processes).

An expected split with no keys must be absent from ``split.yaml`` (vlmforge omits empty splits; see
:mod:`vlmforge.tasks.shards`).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ValidationReport", "validate_energon_dataset"]

_MAX_LISTED = 10


@dataclass
class ValidationReport:
    path: Path
    ok: bool = True
    #: split -> samples read through the loader
    counts: dict[str, int] = field(default_factory=dict)
    #: split -> samples expected (len(expected[split]))
    expected_counts: dict[str, int] = field(default_factory=dict)
    #: key -> media part names of the cooked sample, numeric order
    media_parts: dict[str, list[str]] = field(default_factory=dict)
    #: sample-level errors reported by energon's error handler (repr + key)
    errors: list[str] = field(default_factory=list)
    #: human-readable problems; empty iff ok
    problems: list[str] = field(default_factory=list)

    def add(self, problem: str) -> None:
        self.problems.append(problem)
        self.ok = False


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


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f", … (+{len(items) - _MAX_LISTED})" if len(items) > _MAX_LISTED else "")


def _expand(names: list[str]) -> list[str]:
    import braceexpand  # megatron-energon dependency

    return [expanded for name in names for expanded in braceexpand.braceexpand(name)]


def _check_index(path: Path, report: ValidationReport) -> tuple[dict[str, int], dict[str, list[str]]]:
    meta = path / ".nv-meta"
    try:
        info = json.loads((meta / ".info.json").read_text(encoding="utf-8"))
        shard_counts: dict[str, int] = dict(info["shard_counts"])
        split_doc = yaml.safe_load((meta / "split.yaml").read_text(encoding="utf-8")) or {}
        split_parts = {split: _expand(list(names or [])) for split, names in split_doc["split_parts"].items()}
    except (OSError, KeyError, ValueError, yaml.YAMLError) as exc:
        report.add(f"cannot read .nv-meta of {path}: {exc}")
        return {}, {}
    for shard, count in shard_counts.items():
        idx = path / f"{shard}.idx"
        if not idx.is_file():
            report.add(f"{shard}: missing {idx.name}")
            continue
        size = idx.stat().st_size
        if size % 8 or size // 8 - 1 != count:
            report.add(
                f"{shard}: {idx.name} has {size} bytes, expected {(count + 1) * 8} for {count} samples"
            )
    try:
        with sqlite3.connect(f"file:{meta / 'index.sqlite'}?mode=ro", uri=True) as con:
            rows = dict(
                con.execute("SELECT tar_file_id, COUNT(*) FROM samples GROUP BY tar_file_id").fetchall()
            )
        for tar_id, (shard, count) in enumerate(shard_counts.items()):
            if rows.get(tar_id, 0) != count:
                report.add(f"{shard}: index.sqlite has {rows.get(tar_id, 0)} samples, .info.json {count}")
    except sqlite3.Error as exc:
        report.add(f"cannot read index.sqlite: {exc}")
    for split, shards in split_parts.items():
        for shard in shards:
            if shard not in shard_counts:
                report.add(f"split {split!r} lists {shard}, which is not in .info.json")
    return shard_counts, split_parts


def _read_split(
    path: Path,
    split: str,
    report: ValidationReport,
    error_log: _ErrorLog,
    sample_limit: int | None,
    num_workers: int,
) -> list[str]:
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from vlmforge.energon import ChatSample, ChatTaskEncoder

    worker_config = WorkerConfig(
        rank=0, world_size=1, num_workers=num_workers, global_error_handler=error_log
    )
    keys: list[str] = []
    try:
        dataset = get_val_dataset(
            str(path),
            split_part=split,
            worker_config=worker_config,
            batch_size=None,  # unbatched
            limit=sample_limit,
            task_encoder=ChatTaskEncoder(),
        )
        for item in get_loader(dataset):
            samples = item if isinstance(item, list) else [item]
            for sample in samples:
                if not isinstance(sample, ChatSample):
                    report.add(f"split {split!r}: loader yielded {type(sample).__name__}, not ChatSample")
                    continue
                keys.append(sample.__key__)
                report.media_parts[sample.__key__] = list(sample.parts)
            if sample_limit is not None and len(keys) >= sample_limit:
                break
    except Exception as exc:  # loader-level failure (missing split, unreadable shard, fatal sample errors)
        report.add(f"split {split!r}: loading failed: {type(exc).__name__}: {exc}")
    return keys


def validate_energon_dataset(
    path: Path,
    expected: dict[str, list[str]],
    *,
    sample_limit: int | None = None,
    num_workers: int = 0,
) -> ValidationReport:
    """Load ``path`` with megatron-energon and compare it with ``expected`` (split -> keys in write order).

    ``sample_limit`` reads at most that many samples per split; then only that many keys are required, and
    with ``num_workers <= 1`` (read order = write order) they must be the first ``sample_limit`` expected.
    """
    path = Path(path)
    report = ValidationReport(path=path)
    shard_counts, split_parts = _check_index(path, report)

    for split in sorted(set(split_parts) - set(expected)):
        report.add(f"unexpected split {split!r} in split.yaml")

    with tempfile.TemporaryDirectory(prefix="vlmforge-validate-") as tmp:
        error_log = _ErrorLog(Path(tmp) / "errors.jsonl")
        for split in sorted(expected):
            want = list(expected[split])
            report.expected_counts[split] = len(want)
            shards = split_parts.get(split, [])
            if not want:
                if shards:
                    report.add(
                        f"split {split!r}: expected no samples but split.yaml lists {len(shards)} shards"
                    )
                report.counts[split] = 0
                continue
            if not shards:
                report.add(
                    f"split {split!r}: {len(want)} samples expected but split.yaml has no shards for it"
                )
                report.counts[split] = 0
                continue
            indexed = sum(shard_counts.get(shard, 0) for shard in shards)
            if indexed != len(want):
                report.add(f"split {split!r}: .info.json counts {indexed} samples, expected {len(want)}")

            keys = _read_split(path, split, report, error_log, sample_limit, num_workers)
            report.counts[split] = len(keys)
            _compare(split, keys, want, report, sample_limit, ordered=num_workers <= 1)

        for entry in error_log.read():
            report.errors.append(f"{entry['key']}: {entry['error']}")
    if report.errors:
        report.add(f"{len(report.errors)} sample errors while loading: {_listed(report.errors)}")
    return report


def _compare(
    split: str,
    keys: list[str],
    want: list[str],
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
        report.add(f"split {split!r}: keys read more than once: {_listed(sorted(repeated))}")
    want_set = set(want)
    unexpected = [key for key in keys if key not in want_set]
    if unexpected:
        report.add(f"split {split!r}: {len(unexpected)} unexpected keys: {_listed(unexpected)}")
    if sample_limit is None:
        missing = [key for key in want if key not in seen]
        if missing:
            report.add(f"split {split!r}: {len(missing)} missing keys: {_listed(missing)}")
        elif ordered and keys != want:
            report.add(f"split {split!r}: keys read in a different order than written")
    else:
        target = min(sample_limit, len(want))
        if len(keys) != target:
            report.add(f"split {split!r}: read {len(keys)} samples, expected {target} (limit {sample_limit})")
        if ordered and keys != want[: len(keys)]:
            report.add(f"split {split!r}: keys read differ from the first {len(keys)} written")
