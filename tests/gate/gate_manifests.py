"""Manifests of a release under an output folder, built batch by batch without Prefect or Ray: the gate
tests' input."""

from __future__ import annotations

from pathlib import Path

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork


def build_out(release: Path, out: Path) -> tuple[RunConfig, list[SubsetEntry]]:
    """Manifests of the sample release under ``out``, batch by batch (no Prefect, no Ray)."""
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release

    cfg = RunConfig(release=str(release), out=str(out), batch_lines=4, max_reject_rate=0.01)
    entries = catalog_release(cfg.source.release, batch_lines=cfg.batches.batch_lines)
    for e in entries:
        for i in range(len(e.batch_offsets) - 1):
            build_batch(e, i, BatchWork.of(cfg))
    return cfg, entries
