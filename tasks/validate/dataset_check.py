"""Validate a run's published datasets against its Parquet manifests (``vlmforge validate``).

:func:`validate_subset` / :func:`validate_output` take the expectations from a run's manifests (``samples``:
ok keys per split in line order, their shard and token counts; ``media``: the parts
``<index>.<out_ext>``; ``shards``: names, sizes and sha256 of the tars), read each dataset back
(:func:`~.readback.validate_energon_dataset`), and also check the files on disk and every MetadatasetV2
yaml under ``energon/`` (leaves exist, are prepared, have the split they are loaded with and their
``dataset_config``). :func:`~.check_report.format_reports` renders the result for people.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from ..errors import OutputError
from ..manifests import OutputLayout, read_table
from ..media import frame_part_names
from ..publish import (
    MANIFEST_NAME,
    dataset_copy,
    dataset_splits,
    energon_view,
    file_sha256,
    listing_table,
    published_subsets,
    read_manifest,
    shards_of,
)
from .check_report import ValidationReport, listed
from .readback import validate_energon_dataset

__all__ = ["validate_blend", "validate_output", "validate_subset"]


@dataclass
class _Expected:
    keys: dict[str, Sequence[str]]
    parts: Mapping[str, list[str]]
    fields: Mapping[str, dict[str, Any]]
    ok: pa.Table  # the ok samples in line order: key, shard (and the checked columns)
    shards: list[dict[str, Any]]


_FIELD_COLUMNS = ("line", "text_tokens", "visual_tokens", "total_tokens")
_SAMPLE_COLUMNS = ("key", "status", "split", "shard", *_FIELD_COLUMNS)
_MEDIA_COLUMNS = ("line", "index", "status", "out_ext", "frame_sha256")
#: Keys looked up in the key column (a C scan each) before a key -> row dict is built: a read-back of a few
#: samples per split makes no per-row Python object, a full read-back builds the dict once.
_SCANNED_LOOKUPS = 256
_V = TypeVar("_V")


class _KeyColumn(Sequence[str]):
    """One split's ok keys in line order, held as an Arrow array: a read-back of N samples makes Python
    strings of those N only (a list of every key, and the set made of it, held ~30 MB per 200,000 rows)."""

    def __init__(self, keys: pa.ChunkedArray) -> None:
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return self._keys[index].to_pylist()
        return str(self._keys[index].as_py())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and pc.index(self._keys, key).as_py() >= 0

    def __iter__(self) -> Iterator[str]:
        for chunk in self._keys.chunks:
            yield from chunk.to_pylist()


class _Rows:
    """Rows of a column that hold a value. The first lookups scan the column (:data:`_SCANNED_LOOKUPS`); past
    them a value -> rows dict is built once, so a full read-back stays linear in the rows."""

    def __init__(self, column: pa.ChunkedArray) -> None:
        self.column = column
        self._scans = 0
        self._index: dict[Any, list[int]] | None = None

    def of(self, value: Any) -> list[int]:
        if self._index is None and self._scans < _SCANNED_LOOKUPS:
            self._scans += 1
            return list(pc.indices_nonzero(pc.equal(self.column, value)).to_pylist())
        if self._index is None:
            self._index = {}
            for i, v in enumerate(self.column.to_pylist()):
                self._index.setdefault(v, []).append(i)
        return self._index.get(value, [])


class _PerOkKey(Mapping[str, _V]):
    """Key -> what the manifests promise for that ok sample, made on lookup from Arrow columns (a dict per
    ok sample, made up front, held ~0.3 GB at 200,000 rows for a read-back that looks at 64 of them). Every
    ok key is in it."""

    def __init__(self, rows: _Rows) -> None:
        self._rows = rows  # over the ok samples' key column

    def _value(self, key: str, row: int) -> _V:
        raise NotImplementedError

    def __getitem__(self, key: str) -> _V:
        found = self._rows.of(key)
        if not found:
            raise KeyError(key)
        return self._value(key, found[0])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and bool(self._rows.of(key))

    def __iter__(self) -> Iterator[str]:
        return iter(_KeyColumn(self._rows.column))

    def __len__(self) -> int:
        return len(self._rows.column)


class _ManifestFields(_PerOkKey[dict[str, Any]]):
    """Key -> the ``vlmforge`` json fields the manifest promises for that sample."""

    def __init__(self, subset: str, ok: pa.Table, rows: _Rows) -> None:
        super().__init__(rows)
        self._subset, self._ok = subset, ok

    def _value(self, key: str, row: int) -> dict[str, Any]:
        values = {name: self._ok[name][row].as_py() for name in _FIELD_COLUMNS}
        return {"subset": self._subset, "key": key} | values


class _ManifestParts(_PerOkKey[list[str]]):
    """Key -> media part names in numeric order, from the ``media`` table (a text-only sample's are [], so
    a text-only sample that carries media is caught)."""

    def __init__(self, ok: pa.Table, rows: _Rows, media: pa.Table) -> None:
        super().__init__(rows)
        self._ok, self._media, self._media_rows = ok, media, _Rows(media["line"])

    def _value(self, key: str, row: int) -> list[str]:
        found = self._media_rows.of(self._ok["line"][row].as_py())
        rows = self._media.take(pa.array(found, pa.int64()))  # typed: [] alone is a null array take rejects
        items: list[tuple[int, str]] = []
        for index, out_ext, frames in zip(
            *(rows[name].to_pylist() for name in ("index", "out_ext", "frame_sha256")), strict=True
        ):
            if frames:  # --video-mode frames: one image part per sampled frame
                items += [(index, name) for name in frame_part_names(index, len(frames), out_ext)]
            else:
                items.append((index, f"{index}.{out_ext}"))
        return [name for _i, name in sorted(items)]


def _expected_from_manifests(layout: OutputLayout, subset: str) -> _Expected:
    """What the manifests promise, kept as Arrow columns (only the columns checked); Python objects are
    made for the samples the read-back looks at, so its memory does not grow with the subset's rows."""
    ok = read_table(layout, "samples", subset, columns=_SAMPLE_COLUMNS, where=pc.field("status") == "ok")
    lines = ok["line"]
    if len(ok) > 1 and not pc.all(pc.greater(lines[1:], lines[:-1])).as_py():  # batches write in line order
        ok = ok.sort_by("line")
    split = pc.fill_null(ok["split"], "train")
    keys: dict[str, Sequence[str]] = {"train": [], "val": []}
    for name in pc.unique(split).to_pylist():
        keys[name] = _KeyColumn(ok["key"].filter(pc.equal(split, name)))
    media = read_table(layout, "media", subset, columns=_MEDIA_COLUMNS, where=pc.field("status") == "ok")
    rows = _Rows(ok["key"])
    shards = sorted(read_table(layout, "shards", subset).to_pylist(), key=lambda row: row["shard"])
    return _Expected(
        keys=keys,
        parts=_ManifestParts(ok, rows, media),
        fields=_ManifestFields(subset, ok, rows),
        ok=ok.select(["key", "shard", "line"]),
        shards=shards,
    )


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
    wrong = _shard_mismatches(expected.ok, listing)
    if wrong:
        report.add(f"{len(wrong)} ok samples whose shard differs from the written one: {listed(wrong)}")


def _shard_mismatches(ok: pa.Table, listing: list[dict[str, Any]]) -> list[str]:
    """Ok samples (line order) whose ``samples.shard`` is not the shard the listing wrote them to, compared
    as Arrow columns (Python dicts of every key held ~40 MB per 200,000 rows)."""
    written = shards_of(ok["key"], listing_table(listing))
    same = pc.or_(
        pc.fill_null(pc.equal(ok["shard"], written), False),
        pc.and_(pc.is_null(ok["shard"]), pc.is_null(written)),
    )
    bad = pc.invert(same)
    keys, shards, writes = (
        pc.filter(column, bad).to_pylist() for column in (ok["key"], ok["shard"], written)
    )
    return [
        f"{key} (samples.shard={shard!r}, written to {w!r})"
        for key, shard, w in zip(keys, shards, writes, strict=True)
    ]


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
    with dataset_copy(layout, subset) as path:  # the folder itself for a local output, else a local copy
        return _validate_dataset(layout, subset, path, sample_limit, num_workers, checksums)


def _validate_dataset(
    layout: OutputLayout,
    subset: str,
    path: Path,
    sample_limit: int | None,
    num_workers: int,
    checksums: bool | None,
) -> ValidationReport:
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
        with energon_view(OutputLayout(out)) as root:
            for yaml_path in sorted(root.glob("*.yaml")):
                problems = validate_blend(yaml_path)
                if problems:
                    report = ValidationReport(path=yaml_path)
                    for problem in problems:
                        report.add(problem)
                    reports.append(report)
    return reports
