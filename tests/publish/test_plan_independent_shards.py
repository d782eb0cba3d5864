"""The shards do not depend on the batch plan: the sample release built through 4 batches and through 18
(batch lines, the catalog's split for the cores) publishes the same Energon files, byte for byte. The
catalog may then plan a many-subset release with fewer batches than a one-subset one
(tasks/catalog/release_catalog.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import tree_hashes

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.catalog import catalog_release
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.publish.publish import publish_subset

pytestmark = pytest.mark.slow


def _publish(release: Path, out: Path, batch_lines: int, min_batches: int) -> int:
    cfg = RunConfig(release=str(release), out=str(out), max_reject_rate=0.95, val_fraction=0.2)
    layout, batches = OutputLayout(cfg.out), 0
    for entry in catalog_release(str(release), batch_lines=batch_lines, min_batches=min_batches):
        for index in range(len(entry.batch_offsets) - 1):
            build_batch(entry, index, BatchWork.of(cfg))
            batches += 1
        publish_subset(layout, entry.subset, shard_max_bytes=10**9, shard_max_samples=4)
    return batches


def test_the_same_shards_whatever_the_batch_plan(sample_release: Path, tmp_path: Path) -> None:
    few = _publish(sample_release, tmp_path / "few", batch_lines=10_000, min_batches=1)
    many = _publish(sample_release, tmp_path / "many", batch_lines=2, min_batches=4)
    assert (few, many) == (4, 18)
    hashes = tree_hashes(tmp_path / "few" / "energon")
    assert hashes and hashes == tree_hashes(tmp_path / "many" / "energon")
