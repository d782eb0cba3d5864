"""Validate written Energon datasets by loading them back through megatron-energon and the project's cooker.

:func:`validate_energon_dataset` checks one dataset folder against expected keys (split -> keys in write
order), optionally expected media parts and token counts per key:

* every ``<shard>.tar.idx`` holds ``count + 1`` uint64 offsets for the ``.info.json`` count of its shard, and
  ``index.sqlite`` has the same number of rows per shard;
* the ``.info.json`` total of the split equals the number of expected keys;
* iterating ``get_val_dataset(... task_encoder=ChatTaskEncoder())`` yields exactly the expected keys (in
  order when ``num_workers <= 1``), each as a :class:`~vlmforge.energon.ChatSample` with the expected media
  parts and the expected ``vlmforge`` block in its json part, with no sample-level errors (collected
  through a ``global_error_handler`` that also works inside worker processes).

:func:`validate_subset` / :func:`validate_output` take the expectations from a run's Parquet manifests
(``samples``: ok keys per split in line order, their shard and token counts; ``media``: the parts
``<index>.<out_ext>``; ``shards``: names, sizes and sha256 of the tars) and also check the files on disk
and every MetadatasetV2 yaml under ``energon/`` (leaves exist, are prepared, have the split they are
loaded with and their ``dataset_config``). :func:`format_reports` renders the result for people.

An expected split with no keys must be absent from ``split.yaml`` (vlmforge omits empty splits; see
:mod:`vlmforge.tasks.publish.shards`).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..media.frames import frame_part_names

__all__ = [
    "ValidationReport",
    "format_reports",
    "validate_blend",
    "validate_energon_dataset",
    "validate_output",
    "validate_subset",
]

_MAX_LISTED = 10


@dataclass
class ValidationReport:
    path: Path
    ok: bool = True
    #: the subset, when validated from the manifests
    subset: str | None = None
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
    #: samples read per split was limited to this (None: every sample was read)
    sample_limit: int | None = None

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
    on_sample: Callable[[Any], None] | None = None,
) -> list[str]:
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from ...energon import ChatSample, ChatTaskEncoder

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
                if on_sample is not None:
                    on_sample(sample)
            if sample_limit is not None and len(keys) >= sample_limit:
                break
    except Exception as exc:  # loader-level failure (missing split, unreadable shard, fatal sample errors)
        report.add(f"split {split!r}: loading failed: {type(exc).__name__}: {exc}")
    return keys


class _SampleChecks:
    """Per-sample comparison of cooked samples with expected parts and ``vlmforge`` json fields."""

    def __init__(
        self,
        parts: dict[str, list[str]] | None,
        fields: dict[str, dict[str, Any]] | None,
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
                f"{len(self.part_mismatch)} samples with other media parts: {_listed(self.part_mismatch)}"
            )
        if self.field_mismatch:
            report.add(
                f"{len(self.field_mismatch)} json fields differ from the manifest: "
                f"{_listed(self.field_mismatch)}"
            )


def validate_energon_dataset(
    path: Path,
    expected: dict[str, list[str]],
    *,
    sample_limit: int | None = None,
    num_workers: int = 0,
    expected_parts: dict[str, list[str]] | None = None,
    expected_fields: dict[str, dict[str, Any]] | None = None,
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
    shard_counts, split_parts = _check_index(path, report)
    checks = _SampleChecks(expected_parts, expected_fields)

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

            keys = _read_split(path, split, report, error_log, sample_limit, num_workers, checks)
            report.counts[split] = len(keys)
            _compare(split, keys, want, report, sample_limit, ordered=num_workers <= 1)

        for entry in error_log.read():
            report.errors.append(f"{entry['key']}: {entry['error']}")
    checks.report(report)
    if report.errors:
        report.add(f"{len(report.errors)} sample errors while loading: {_listed(report.errors)}")
    return report


# --- Against a run's manifests -------------------------------------------------------------------------


@dataclass
class _Expected:
    keys: dict[str, list[str]]
    parts: dict[str, list[str]]
    fields: dict[str, dict[str, Any]]
    shard_of_key: dict[str, str | None]
    shards: list[dict[str, Any]]


def _expected_from_manifests(layout: Any, subset: str) -> _Expected:
    from ..manifests import read_table

    samples = read_table(layout, "samples", subset).to_pylist()
    ok = sorted((row for row in samples if row["status"] == "ok"), key=lambda row: row["line"])
    keys: dict[str, list[str]] = {"train": [], "val": []}
    fields: dict[str, dict[str, Any]] = {}
    shard_of_key: dict[str, str | None] = {}
    line_key: dict[int, str] = {}
    for row in ok:
        keys.setdefault(row["split"] or "train", []).append(row["key"])
        fields[row["key"]] = {
            "subset": subset,
            "line": row["line"],
            "key": row["key"],
            "text_tokens": row["text_tokens"],
            "visual_tokens": row["visual_tokens"],
            "total_tokens": row["total_tokens"],
        }
        shard_of_key[row["key"]] = row["shard"]
        line_key[row["line"]] = row["key"]
    parts: dict[str, list[tuple[int, str]]] = {key: [] for key in fields}
    for row in read_table(layout, "media", subset).to_pylist():
        key = line_key.get(row["line"])
        if key is not None and row["status"] == "ok":
            frames = row.get("frame_sha256")
            if frames:  # --video-mode frames: one image part per sampled frame
                names = frame_part_names(row["index"], len(frames), row["out_ext"])
                parts[key] += [(row["index"], name) for name in names]
            else:
                parts[key].append((row["index"], f"{row['index']}.{row['out_ext']}"))
    shards = sorted(read_table(layout, "shards", subset).to_pylist(), key=lambda row: row["shard"])
    return _Expected(
        keys=keys,
        parts={key: [name for _i, name in sorted(items)] for key, items in parts.items()},
        fields=fields,
        shard_of_key=shard_of_key,
        shards=shards,
    )


def _check_files(path: Path, expected: _Expected, report: ValidationReport, checksums: bool) -> None:
    from .shards import MANIFEST_NAME, file_sha256, read_manifest

    on_disk = sorted(p.name for p in path.glob("*.tar"))
    listed = [row["shard"] for row in expected.shards]
    if not listed:
        report.add("the shards manifest lists no shard for this subset")
    missing = sorted(set(listed) - set(on_disk))
    extra = sorted(set(on_disk) - set(listed))
    if missing:
        report.add(f"{len(missing)} shards in the manifest are missing on disk: {_listed(missing)}")
    if extra:
        report.add(f"{len(extra)} tar files are not in the shards manifest: {_listed(extra)}")
    for row in expected.shards:
        tar = path / row["shard"]
        if not tar.is_file():
            continue
        size = tar.stat().st_size
        if size != row["bytes"]:
            report.add(f"{row['shard']}: {size} bytes on disk, the manifest says {row['bytes']}")
        elif checksums and file_sha256(tar) != row["sha256"]:
            report.add(f"{row['shard']}: sha256 differs from the manifest")
    try:
        listing = read_manifest(path)
    except (OSError, ValueError) as exc:
        report.add(f"cannot read {MANIFEST_NAME}: {exc}")
        return
    by_name = {entry["shard"]: entry for entry in listing}
    for row in expected.shards:
        entry = by_name.get(row["shard"])
        if entry is None:
            continue
        for name in ("split", "samples", "bytes", "sha256"):
            if entry.get(name) != row[name]:
                report.add(
                    f"{row['shard']}: {MANIFEST_NAME} has {name}={entry.get(name)!r}, manifest {row[name]!r}"
                )
    written = {key: entry["shard"] for entry in listing for key in entry.get("keys", [])}
    wrong = [
        f"{key} (samples.shard={shard!r}, written to {written.get(key)!r})"
        for key, shard in expected.shard_of_key.items()
        if written.get(key) != shard
    ]
    if wrong:
        report.add(f"{len(wrong)} ok samples whose shard differs from the written one: {_listed(wrong)}")


def validate_subset(
    out: str,
    subset: str,
    *,
    sample_limit: int | None = None,
    num_workers: int = 0,
    checksums: bool | None = None,
) -> ValidationReport:
    """Validate ``OUT/energon/<subset>`` against the run's manifests (see the module docstring).

    ``sample_limit`` reads the first N samples of each split only; ``checksums`` re-hashes every tar
    (default: only when every sample is read).
    """
    from ..manifests import OutputLayout

    layout = OutputLayout(out)
    path = Path(layout.energon) / subset
    expected = _expected_from_manifests(layout, subset)
    if not path.is_dir():
        report = ValidationReport(path=path, subset=subset, sample_limit=sample_limit)
        report.add(f"no Energon dataset at {path}")
        return report
    report = validate_energon_dataset(
        path,
        expected.keys,
        sample_limit=sample_limit,
        num_workers=num_workers,
        expected_parts=expected.parts,
        expected_fields=expected.fields,
    )
    report.subset = subset
    _check_files(path, expected, report, sample_limit is None if checksums is None else checksums)
    return report


def published_subsets(out: str) -> list[str]:
    """Subsets with a published Energon dataset under ``OUT/energon``."""
    from ..manifests import OutputLayout
    from .shards import MANIFEST_NAME

    root = Path(OutputLayout(out).energon)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_NAME).is_file()
    )


def validate_blend(path: Path) -> list[str]:
    """Problems of a MetadatasetV2 yaml written by vlmforge (``blend`` nodes over dataset folders): each leaf
    exists, is prepared, has a non-empty split for the split it is loaded in, and its ``dataset_config``."""
    from .shards import dataset_splits

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        splits = doc["splits"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        return [f"{path.name}: cannot read the metadataset: {exc}"]
    problems: list[str] = []
    for split, node in (splits or {}).items():
        leaves = (node or {}).get("blend") or (node or {}).get("blend_epochized") or []
        if not leaves:
            problems.append(f"{path.name}: split {split!r} has no blend entries")
        for leaf in leaves:
            target = (path.parent / str(leaf.get("path", ""))).resolve()
            if not (target / ".nv-meta" / ".info.json").is_file():
                problems.append(f"{path.name}: {split} leaf {leaf.get('path')!r} is not a prepared dataset")
                continue
            part = leaf.get("split_part") or split
            if part not in dataset_splits(target):
                problems.append(f"{path.name}: {split} leaf {leaf.get('path')!r} has no {part!r} split")
            config = leaf.get("dataset_config")
            if config and not (target / ".nv-meta" / config).is_file():
                problems.append(f"{path.name}: {split} leaf {leaf.get('path')!r} lacks .nv-meta/{config}")
    return problems


def validate_output(
    out: str,
    subsets: Sequence[str] | None = None,
    *,
    sample_limit: int | None = None,
    num_workers: int = 0,
    checksums: bool | None = None,
) -> list[ValidationReport]:
    """Validate the named (default: every published) subset of ``OUT`` and, when no subset is named, every
    metadataset yaml under ``OUT/energon`` (one extra report per yaml file with problems)."""
    from ..errors import OutputError
    from ..manifests import OutputLayout

    names = list(subsets) if subsets else published_subsets(out)
    if not names:
        raise OutputError(
            f"{out!r} has no published Energon dataset under energon/: run `vlmforge run` first"
        )
    reports = [
        validate_subset(out, name, sample_limit=sample_limit, num_workers=num_workers, checksums=checksums)
        for name in names
    ]
    if not subsets:
        root = Path(OutputLayout(out).energon)
        for yaml_path in sorted(root.glob("*.yaml")):
            problems = validate_blend(yaml_path)
            if problems:
                report = ValidationReport(path=yaml_path)
                for problem in problems:
                    report.add(problem)
                reports.append(report)
    return reports


def format_reports(reports: Sequence[ValidationReport]) -> str:
    """One line per dataset (``ok``/``FAILED``, samples read per split) followed by its problems."""
    lines: list[str] = []
    for report in reports:
        name = report.subset or report.path.name
        read = ", ".join(
            f"{split} {report.counts.get(split, 0)}/{report.expected_counts.get(split, 0)}"
            for split in sorted(report.expected_counts)
            if report.expected_counts[split] or report.counts.get(split)
        )
        scope = f" (first {report.sample_limit} per split)" if report.sample_limit is not None else ""
        lines.append(f"{'ok' if report.ok else 'FAILED':6} {name}: {read or '-'} samples read{scope}")
        lines += [f"       - {problem}" for problem in report.problems]
    failed = sum(not r.ok for r in reports)
    lines.append(f"{len(reports) - failed} ok, {failed} failed")
    return "\n".join(lines)


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
