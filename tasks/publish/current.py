"""Whether a subset's published dataset is still current, so a rerun need not gate, publish or read it back.

A subset's **publish fingerprint** hashes everything its gate verdict and its dataset's bytes depend on: the
catalog's hashes (README, JSONL, license, media recipe, media tars), the fingerprint of each of its batches
(which holds the options that change a batch and the code version, ``PIPELINE_VERSION``), the shard and gate
options, the gate overrides in force and the shipped suites. Once a subset is published (and again once it
is read back correctly), the flow records that fingerprint with the verdict in
``OUT/runs/current/<subset>.json``
(:func:`record_current`); a later run whose every batch of the subset was skipped as current and whose
fingerprint is the recorded one leaves the subset as it is: the earlier verdict and dataset stand
(:func:`current_publish`); one that was published but not yet read back (a run stopped in between) is
only read back. The record is removed before a subset is gated again (:func:`forget_current`),
so a publish cut short leaves no record that vouches for a dataset it did not make.

The record also holds the sha256 of the dataset's ``vlmforge-shards.json``: a dataset removed or replaced
since (``refresh`` unpublishing it, a person deleting it) is not current whatever the fingerprint says.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from ...schemas.config import PIPELINE_VERSION
from ...schemas.records import SubsetEntry
from ...schemas.stage_options import PublishWork
from ..batch import batch_fingerprint
from ..gate import load_overrides, suites_digest
from ..manifests import OutputLayout
from ..storage import atomic_write_bytes
from .listing import MANIFEST_NAME


@dataclass(frozen=True)
class CurrentPublish:
    """The record of a subset's last publish that was read back correctly."""

    subset: str
    fingerprint: str
    run_id: str  # the run that gated and published it
    gate: str  # its verdict, as that run's summary showed it
    shards: int
    listing_sha256: str
    validated: bool = False  # read back correctly (a run stopped between publish and read-back: not yet)
    recorded: str = ""


def publish_fingerprint(entry: SubsetEntry, work: PublishWork) -> str:
    """Hash of the inputs, options and code version that decide ``entry``'s gate verdict and dataset (the
    batch, shard and gate options: why it takes the batch stage's options too)."""
    payload: dict[str, Any] = {
        "subset": entry.subset,
        "readme_sha256": entry.readme_sha256,
        "jsonl_sha256": entry.jsonl_sha256,
        "license": entry.license,
        "media_recipe_sha256": entry.media_recipe_sha256,
        "media_tars": list(entry.media_tars),
        "batches": [batch_fingerprint(entry, i, work.batch) for i in range(len(entry.batch_offsets) - 1)],
        "shards": work.shards.model_dump(mode="json"),
        "gate": work.gate.model_dump(mode="json", exclude={"gate_overrides"}),
        "overrides": [[k, dict(v)] for k, v in load_overrides(work.gate.gate_overrides).entries],
        "suites": suites_digest(),
        "pipeline_version": PIPELINE_VERSION,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _record_path(layout: OutputLayout, subset: str) -> str:
    return f"{layout.root}/runs/current/{subset}.json"


def _listing_sha256(layout: OutputLayout, subset: str) -> str | None:
    try:
        return hashlib.sha256(layout.fs.cat_file(f"{layout.energon}/{subset}/{MANIFEST_NAME}")).hexdigest()
    except (OSError, FileNotFoundError):
        return None


def current_publish(layout: OutputLayout, subset: str, fingerprint: str) -> CurrentPublish | None:
    """The record of ``subset``'s publish when it was made under ``fingerprint`` and its dataset is still
    the one published then; None otherwise (no record, another fingerprint, the dataset gone or changed)."""
    try:
        data = json.loads(layout.fs.cat_file(_record_path(layout, subset)))
        record = CurrentPublish(**{k: data[k] for k in CurrentPublish.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return None
    if record.fingerprint != fingerprint:
        return None
    if _listing_sha256(layout, subset) != record.listing_sha256:
        return None
    return record


def record_current(
    layout: OutputLayout,
    subset: str,
    fingerprint: str,
    *,
    run_id: str,
    gate: str,
    shards: int,
    validated: bool,
) -> None:
    """Record that ``subset``'s dataset was published by ``run_id`` with verdict ``gate`` under
    ``fingerprint`` (after the publish), and ``validated`` once it was read back correctly (nothing is
    recorded when the dataset has no listing)."""
    listing = _listing_sha256(layout, subset)
    if listing is None:
        return
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = CurrentPublish(subset, fingerprint, run_id, gate, shards, listing, validated, now)
    atomic_write_bytes(layout.fs, _record_path(layout, subset), json.dumps(asdict(record), indent=1).encode())


def forget_current(layout: OutputLayout, subset: str) -> None:
    """Remove ``subset``'s record: it is about to be gated and published again."""
    path = _record_path(layout, subset)
    with contextlib.suppress(OSError, FileNotFoundError):
        layout.fs.rm_file(path)
