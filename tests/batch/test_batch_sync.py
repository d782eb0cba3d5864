"""A batch brings the objects it stored to disk once, before the manifest part that marks it complete: no
sync per object (each held the media step's thread for the disk's latency), and never a marker naming an
object a power loss could still take."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from batch_release import SUBSET, config, make_release

from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks import storage
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.manifests import OutputLayout, read_table


def test_one_sync_per_batch_before_its_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = make_release(tmp_path)
    cfg = config(tmp_path)
    layout = OutputLayout(cfg.out)
    file_syncs: list[str] = []
    store_syncs: list[bool] = []  # at each sync of the store's file system: was the batch marked yet?
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        file_syncs.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def sync_store(folder: str) -> None:
        store_syncs.append(bool(layout.fs.glob(f"{layout.root}/manifests/samples/**/*.parquet")))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(storage, "_sync_file_system", sync_store)
    stats = build_batch(entry, 0, BatchWork.of(cfg))
    assert stats.images > 0
    assert store_syncs == [False]  # once, and before the samples part (the batch's completion marker)
    store = str(Path(cfg.store_url.removeprefix("file://")).resolve())
    assert not [p for p in file_syncs if p.startswith(store)], file_syncs  # no object synced on its own
    assert read_table(layout, "samples", SUBSET).num_rows > 0


def test_a_short_object_is_written_again(tmp_path: Path) -> None:
    """An object a power loss cut short before the batch's sync is stored whole by the next put."""
    cs = storage.ContentStore(str(tmp_path / "store"), sync_later=True)
    sha = cs.put(b"0123456789")
    Path(cs.path(sha)).write_bytes(b"01234")
    assert cs.put(b"0123456789") == sha
    cs.sync_pending()
    assert Path(cs.path(sha)).read_bytes() == b"0123456789"
