"""The ``shards`` suite: a subset's Energon dataset checked against its samples manifest before it goes live.

``write_energon_dataset`` calls the check of :func:`shards_check` on the staged folder before the swap; a
failure raises :class:`ShardsGateFailed`, so the previously published dataset stays in place. The checked
facts: ``vlmforge-shards.json`` (the listing of keys per shard), megatron-energon's index
(``.nv-meta/.info.json``), the shard files' sizes and, for a published dataset, the shards manifest and the
samples' ``shard`` column. A dataset that cannot be read is a failed result, never a crash.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import GateFailed
from ..gate import (
    GateResult,
    ManifestParts,
    Source,
    add_shard_views,
    open_views,
    record_gate,
    run_suite,
    shards_profile,
    shorten,
)
from ..manifests import OutputLayout
from .listing import MANIFEST_NAME, listing_table

INFO = ".nv-meta/.info.json"


class ShardsGateFailed(GateFailed):
    """The staged Energon dataset of a subset failed the ``shards`` suite; the published one stays."""


def shards_check(layout: OutputLayout, subset: str, *, run_id: str) -> Callable[[Path], None]:
    """The check ``write_energon_dataset`` runs on the staged folder before the swap.

    It validates the staged dataset against the subset's samples manifest, records the result under
    ``OUT/quality/<run_id>/<subset>.shards.json`` and raises :class:`ShardsGateFailed` when it fails,
    so the previously published dataset stays in place.
    """

    def check(staged: Path) -> None:
        result = check_shards(subset, ManifestParts.of(layout, "samples", subset), staged)
        record_gate(layout, run_id, result)
        if not result.passed:
            raise ShardsGateFailed(f"{subset}: {result.summary()}")

    return check


def check_shards(
    subset: str,
    samples: Source,
    dataset: Path,
    *,
    published: bool = False,
    shards: pa.Table | None = None,
) -> GateResult:
    """Validate the Energon dataset folder ``dataset`` (staged or published) against the samples manifest.

    With ``published`` the ``samples.shard`` column and ``shards`` (the shards manifest) are compared
    too; before the swap they still describe the previous version, so they are left out.
    """
    t0 = time.perf_counter()
    result = GateResult(subset=subset, passed=True, stage="shards")
    dataset = Path(dataset)
    try:
        listing, counts = _read_listing(dataset), _read_shard_counts(dataset)
    except ValueError as exc:
        result.passed, result.suites["shards"] = False, False
        result.failures.append(f"shards: the dataset at {dataset.name} cannot be checked: {exc}")
    else:
        per_manifest = _manifest_counts(shards) if published and shards is not None else None
        meta_rows, listed = _shard_rows(dataset, listing, counts, per_manifest)
        del listing  # a Python string per key; the suite reads the Arrow table
        with open_views({"samples": samples}) as con:
            result.params = {"ok_samples": add_shard_views(con, meta_rows, listed)}
            run_suite(result, "shards", shards_profile(con, published=published), result.params, con)
    result.seconds = time.perf_counter() - t0
    return result


def _read_listing(dataset: Path) -> list[dict[str, Any]]:
    """The dataset's ``vlmforge-shards.json``; ValueError saying what is wrong with it."""
    try:
        listing = json.loads((dataset / MANIFEST_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{MANIFEST_NAME} is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{MANIFEST_NAME} is unreadable ({shorten(exc, 120)})") from None
    if not isinstance(listing, list) or not all(
        isinstance(e, dict)
        and isinstance(e.get("shard"), str)
        and isinstance(e.get("keys"), list)
        and all(isinstance(k, str) for k in e["keys"])
        for e in listing
    ):
        raise ValueError(f"{MANIFEST_NAME} is not a list of {{shard, split, samples, bytes, keys}} entries")
    return listing


def _read_shard_counts(dataset: Path) -> dict[str, Any]:
    """megatron-energon's samples per shard (``.nv-meta/.info.json``); ValueError when it is not there."""
    try:
        info = json.loads((dataset / INFO).read_text(encoding="utf-8"))
        counts = info.get("shard_counts", {}) if isinstance(info, dict) else {}
    except FileNotFoundError:
        raise ValueError(f"{INFO} is missing (megatron-energon prepare did not run)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{INFO} is unreadable ({shorten(exc, 120)})") from None
    return counts if isinstance(counts, dict) else {}


def _manifest_counts(shards: pa.Table) -> dict[str, int]:
    """Samples per shard according to the shards manifest."""
    per_manifest: dict[str, int] = {}
    for name, n in zip(shards["shard"].to_pylist(), shards["samples"].to_pylist(), strict=True):
        per_manifest[name] = per_manifest.get(name, 0) + int(n)
    return per_manifest


def _shard_rows(
    dataset: Path,
    listing: list[dict[str, Any]],
    counts: dict[str, Any],
    per_manifest: dict[str, int] | None,
) -> tuple[list[dict[str, Any]], pa.Table]:
    """The ``shard_meta`` rows (one per listed shard) and the ``listing`` table (one row per listed key)."""
    meta_rows = []
    for entry in listing:
        path = dataset / entry["shard"]
        meta_rows.append(
            {
                "shard": entry["shard"],
                "split": entry.get("split") if isinstance(entry.get("split"), str) else None,
                "listed_samples": _int_or_none(entry.get("samples")),
                "indexed_samples": _int_or_none(counts.get(entry["shard"])),
                "listed_bytes": _int_or_none(entry.get("bytes")),
                "file_bytes": path.stat().st_size if path.is_file() else None,
                "manifest_samples": None if per_manifest is None else per_manifest.get(entry["shard"]),
            }
        )
    return meta_rows, listing_table(listing)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
