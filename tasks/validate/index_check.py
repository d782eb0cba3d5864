"""Check a prepared dataset's ``.nv-meta`` index against itself: ``.info.json``, ``split.yaml``, the
``.tar.idx`` files and ``index.sqlite`` must agree on every shard and its sample count."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import yaml

from .check_report import ValidationReport

__all__ = ["check_index"]


def check_index(path: Path, report: ValidationReport) -> tuple[dict[str, int], dict[str, list[str]]]:
    """(shard -> samples from ``.info.json``, split -> shards from ``split.yaml``); problems go to
    ``report``."""
    meta = path / ".nv-meta"
    try:
        info = json.loads((meta / ".info.json").read_text(encoding="utf-8"))
        shard_counts: dict[str, int] = dict(info["shard_counts"])
        split_doc = yaml.safe_load((meta / "split.yaml").read_text(encoding="utf-8")) or {}
        split_parts = {split: _expand(list(names or [])) for split, names in split_doc["split_parts"].items()}
    except (OSError, KeyError, ValueError, yaml.YAMLError) as exc:
        report.add(f"cannot read .nv-meta of {path}: {exc}")
        return {}, {}
    _check_tar_indexes(path, shard_counts, report)
    _check_sqlite(meta / "index.sqlite", shard_counts, report)
    for split, shards in split_parts.items():
        for shard in shards:
            if shard not in shard_counts:
                report.add(f"split {split!r} lists {shard}, which is not in .info.json")
    return shard_counts, split_parts


def _expand(names: list[str]) -> list[str]:
    import braceexpand  # megatron-energon dependency

    return [expanded for name in names for expanded in braceexpand.braceexpand(name)]


def _check_tar_indexes(path: Path, shard_counts: dict[str, int], report: ValidationReport) -> None:
    """Every ``<shard>.tar.idx`` holds ``count + 1`` uint64 offsets."""
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


def _check_sqlite(db: Path, shard_counts: dict[str, int], report: ValidationReport) -> None:
    """``index.sqlite`` has as many rows per shard as ``.info.json`` counts."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            rows = dict(
                con.execute("SELECT tar_file_id, COUNT(*) FROM samples GROUP BY tar_file_id").fetchall()
            )
        for tar_id, (shard, count) in enumerate(shard_counts.items()):
            if rows.get(tar_id, 0) != count:
                report.add(f"{shard}: index.sqlite has {rows.get(tar_id, 0)} samples, .info.json {count}")
    except sqlite3.Error as exc:
        report.add(f"cannot read index.sqlite: {exc}")
