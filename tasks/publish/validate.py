"""Validate a run's published datasets against its Parquet manifests (``vlmforge validate``).

:func:`validate_subset` / :func:`validate_output` take the expectations from a run's manifests (``samples``:
ok keys per split in line order, their shard and token counts; ``media``: the parts
``<index>.<out_ext>``; ``shards``: names, sizes and sha256 of the tars), read each dataset back
(:func:`~.readback.validate_energon_dataset`), and also check the files on disk and every MetadatasetV2
yaml under ``energon/`` (leaves exist, are prepared, have the split they are loaded with and their
``dataset_config``). :func:`~.report.format_reports` renders the result for people.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import yaml

from ..errors import OutputError
from ..manifests import OutputLayout, read_table
from ..media.frames import frame_part_names
from .listing import MANIFEST_NAME, published_subsets, read_manifest
from .metadataset import dataset_splits
from .readback import validate_energon_dataset
from .report import ValidationReport, listed
from .tar import file_sha256

__all__ = ["validate_blend", "validate_output", "validate_subset"]


@dataclass
class _Expected:
    keys: dict[str, list[str]]
    parts: dict[str, list[str]]
    fields: Mapping[str, dict[str, Any]]
    shard_of_key: dict[str, str | None]
    shards: list[dict[str, Any]]


_FIELD_COLUMNS = ("line", "text_tokens", "visual_tokens", "total_tokens")
_SAMPLE_COLUMNS = ("key", "status", "split", "shard", *_FIELD_COLUMNS)
_MEDIA_COLUMNS = ("line", "index", "status", "out_ext", "frame_sha256")


class _ManifestFields(Mapping[str, dict[str, Any]]):
    """Key -> the ``vlmforge`` json fields the manifest promises for that sample, made on lookup from the
    manifest's columns. A dict per ok sample, made up front, held ~0.3 GB at 200,000 rows for a read-back
    that looks at 64 of them."""

    def __init__(self, subset: str, columns: dict[str, list[Any]]) -> None:
        self._subset, self._columns = subset, columns
        self._row = {key: i for i, key in enumerate(columns["key"])}

    def __getitem__(self, key: str) -> dict[str, Any]:
        i = self._row[key]
        values = {name: self._columns[name][i] for name in _FIELD_COLUMNS}
        return {"subset": self._subset, "key": key} | values

    def __iter__(self) -> Iterator[str]:
        return iter(self._row)

    def __len__(self) -> int:
        return len(self._row)


def _expected_from_manifests(layout: OutputLayout, subset: str) -> _Expected:
    """What the manifests promise, read column by column (only the columns checked, no row objects)."""
    samples = read_table(layout, "samples", subset, columns=_SAMPLE_COLUMNS)
    ok = samples.filter(pc.equal(samples["status"], "ok")).sort_by("line")
    columns = {name: ok[name].to_pylist() for name in _SAMPLE_COLUMNS if name != "status"}
    keys: dict[str, list[str]] = {"train": [], "val": []}
    for key, split in zip(columns["key"], columns["split"], strict=True):
        keys.setdefault(split or "train", []).append(key)
    shards = sorted(read_table(layout, "shards", subset).to_pylist(), key=lambda row: row["shard"])
    return _Expected(
        keys=keys,
        parts=_expected_parts(layout, subset, dict(zip(columns["line"], columns["key"], strict=True))),
        fields=_ManifestFields(subset, columns),
        shard_of_key=dict(zip(columns["key"], columns["shard"], strict=True)),
        shards=shards,
    )


def _expected_parts(layout: OutputLayout, subset: str, line_key: dict[int, str]) -> dict[str, list[str]]:
    """Key -> media part names in numeric order, from the ``media`` table (every ok key: none is [])."""
    media = read_table(layout, "media", subset, columns=_MEDIA_COLUMNS)
    media = media.filter(pc.equal(media["status"], "ok"))
    parts: dict[str, list[tuple[int, str]]] = {key: [] for key in line_key.values()}
    for line, index, out_ext, frames in zip(
        *(media[name].to_pylist() for name in ("line", "index", "out_ext", "frame_sha256")), strict=True
    ):
        key = line_key.get(line)
        if key is None:
            continue
        if frames:  # --video-mode frames: one image part per sampled frame
            names = frame_part_names(index, len(frames), out_ext)
            parts[key] += [(index, name) for name in names]
        else:
            parts[key].append((index, f"{index}.{out_ext}"))
    return {key: [name for _i, name in sorted(items)] for key, items in parts.items()}


def _check_tars(path: Path, expected: _Expected, report: ValidationReport, checksums: bool) -> None:
    """The tars on disk are the ones the ``shards`` manifest lists, with its sizes (and sha256)."""
    on_disk = sorted(p.name for p in path.glob("*.tar"))
    listed_shards = [row["shard"] for row in expected.shards]
    if not listed_shards:
        report.add("the shards manifest lists no shard for this subset")
    missing = sorted(set(listed_shards) - set(on_disk))
    extra = sorted(set(on_disk) - set(listed_shards))
    if missing:
        report.add(f"{len(missing)} shards in the manifest are missing on disk: {listed(missing)}")
    if extra:
        report.add(f"{len(extra)} tar files are not in the shards manifest: {listed(extra)}")
    for row in expected.shards:
        tar = path / row["shard"]
        if not tar.is_file():
            continue
        size = tar.stat().st_size
        if size != row["bytes"]:
            report.add(f"{row['shard']}: {size} bytes on disk, the manifest says {row['bytes']}")
        elif checksums and file_sha256(tar) != row["sha256"]:
            report.add(f"{row['shard']}: sha256 differs from the manifest")


def _check_listing(path: Path, expected: _Expected, report: ValidationReport) -> None:
    """The dataset's ``vlmforge-shards.json`` agrees with the ``shards`` and ``samples`` manifests."""
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
        report.add(f"{len(wrong)} ok samples whose shard differs from the written one: {listed(wrong)}")


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
    _check_tars(path, expected, report, sample_limit is None if checksums is None else checksums)
    _check_listing(path, expected, report)
    return report


def validate_blend(path: Path) -> list[str]:
    """Problems of a MetadatasetV2 yaml written by vlmforge (``blend`` nodes over dataset folders): each leaf
    exists, is prepared, has a non-empty split for the split it is loaded in, and its ``dataset_config``."""
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
            problems += _leaf_problems(path, split, leaf)
    return problems


def _leaf_problems(path: Path, split: str, leaf: dict[str, Any]) -> list[str]:
    target = (path.parent / str(leaf.get("path", ""))).resolve()
    where = f"{path.name}: {split} leaf {leaf.get('path')!r}"
    if not (target / ".nv-meta" / ".info.json").is_file():
        return [f"{where} is not a prepared dataset"]
    problems: list[str] = []
    part = leaf.get("split_part") or split
    if part not in dataset_splits(target):
        problems.append(f"{where} has no {part!r} split")
    config = leaf.get("dataset_config")
    if config and not (target / ".nv-meta" / config).is_file():
        problems.append(f"{where} lacks .nv-meta/{config}")
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
