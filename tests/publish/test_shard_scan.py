"""The publish stage's shard scan gives megatron-energon's prepare what its own tarfile scan gives it.

Energon's ``WebdatasetPreparator._preprocess_tar`` is the verdict: on shards the writer made (long keys that
need ``././@LongLink`` headers, media parts, several shards, both splits) both scans must yield equal items
and write byte-identical ``.tar.idx`` files, and a whole prepared dataset must come out byte for byte as
Energon's unmodified prepare makes it. A tar the scan does not understand is left to Energon's scan.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from megatron.energon.epathlib import EPath
from megatron.energon.flavors.webdataset.aggregator_pool import BaseAggregator
from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

from vlmforge.tasks.publish import dataset as dataset_module
from vlmforge.tasks.publish.dataset import write_energon_dataset
from vlmforge.tasks.publish.inline_pool import QUEUED_BATCHES, InlineAggregatorPool
from vlmforge.tasks.publish.prepare import indexed_keys, run_prepare, seal_index
from vlmforge.tasks.publish.rolling import Done
from vlmforge.tasks.publish.samples import EnergonPrepareError, MediaPart, ShardSample
from vlmforge.tasks.publish.shard_scan import scan_shard
from vlmforge.tasks.publish.tar import file_sha256

_forks: list[int] = []
os.register_at_fork(before=lambda: _forks.append(os.getpid()))  # every fork of the test process, counted


def _samples(n: int) -> list[ShardSample]:
    out = []
    for i in range(n):
        key = f"s{i:04d}" + ("_" + "k" * 120 if i % 3 == 0 else "")  # every third key needs a long name
        content: list[object] = [{"type": "text", "text": f"question {i} " * (i % 7)}]
        media: list[MediaPart] = []
        for j in range(i % 3):
            content.append({"type": "image", "part": f"{j}.jpg"})
            media.append(MediaPart.from_bytes(f"{j}.jpg", bytes([i % 256]) * (100 + 37 * i + j)))
        doc = {"messages": [{"role": "user", "content": content}], "vlmforge": {"key": key}}
        out.append(ShardSample(key=key, split="val" if i % 5 == 0 else "train", json=doc, media=tuple(media)))
    return out


def _written(tmp_path: Path, sample_format: str = "bridge") -> Path:
    dest = tmp_path / "ds"
    write_energon_dataset(
        _samples(40), dest, subset="scan", shard_max_samples=7, fsync=False, sample_format=sample_format
    )
    return dest


def _scan_both(dest: Path, tmp_path: Path, name: str) -> tuple[list, bytes, list, bytes]:
    """Energon's scan and ours over copies of the shard ``name``: (items, .tar.idx bytes) each."""
    results = []
    for who, scan in (("energon", WebdatasetPreparator._preprocess_tar), ("vlmforge", scan_shard)):
        folder = tmp_path / who
        folder.mkdir(exist_ok=True)
        shutil.copy(dest / name, folder / name)
        items = list(scan(name, {name: 3}, EPath(folder), 50))
        for item in items:  # the shard's path names the folder it was scanned in
            if hasattr(item, "shard_info"):
                item.shard_info.path = EPath("/")
        results += [items, (folder / f"{name}.idx").read_bytes()]
    return results[0], results[1], results[2], results[3]


@pytest.mark.parametrize("sample_format", ["bridge", "crude"])  # media in one pickled member, or one each
def test_scan_yields_energons_items_and_tar_index(tmp_path: Path, sample_format: str) -> None:
    dest = _written(tmp_path, sample_format)
    shards = sorted(p.name for p in dest.glob("*.tar"))
    assert len(shards) > 4 and any(s.startswith("val-") for s in shards)
    for name in shards:
        theirs, their_idx, ours, our_idx = _scan_both(dest, tmp_path, name)
        assert ours == theirs, name
        assert our_idx == their_idx, name
    media_member = "0.jpg" if sample_format == "crude" else "jpgs"
    assert any(getattr(item, "part_name", None) == media_member for item in theirs)


def test_a_tar_we_did_not_write_gets_energons_own_scan(tmp_path: Path) -> None:
    """A directory member (no writer of ours makes one) is not read by our scan: Energon's scan decides."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for key in ("sub/a", "sub/b"):
            data = b'{"x": 1}'
            info = tarfile.TarInfo(f"{key}.json")
            info.size = len(data)
            info.pax_headers = {"comment": "pax"}
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "odd.tar").write_bytes(buf.getvalue())
    theirs, their_idx, ours, our_idx = _scan_both(tmp_path / "src", tmp_path, "odd.tar")
    assert [getattr(i, "sample_key", None) for i in theirs if hasattr(i, "sample_key")] == ["sub/a", "sub/b"]
    assert (ours, our_idx) == (theirs, their_idx)


@pytest.mark.parametrize("workers", [1, 2])  # one worker runs in this process (inline_pool), two are forked
def test_prepared_dataset_is_byte_identical_to_energons_own_prepare(tmp_path: Path, workers: int) -> None:
    dest = _written(tmp_path)
    shards = sorted(p.name for p in dest.glob("*.tar"))
    patterns = [("train", r"train-.*"), ("val", r"val-.*")]
    twins = {}
    for who in ("vlmforge", "energon"):
        root = tmp_path / f"prep-{who}"
        root.mkdir()
        for name in shards:
            shutil.copy(dest / name, root / name)
        if who == "vlmforge":
            forks_before = len(_forks)
            run_prepare(root, shards, patterns, workers)
            # one worker forks nothing; two are Energon's forked pool (so the count can tell them apart)
            assert len(_forks) - forks_before == (0 if workers == 1 else workers)
        else:  # Energon's prepare as shipped (tarfile scan), sealed the same way
            WebdatasetPreparator.prepare_dataset(
                root, shards, split_parts_patterns=patterns, shuffle_seed=None, workers=2
            )
            seal_index(root, {name: file_sha256(root / name) for name in shards})
        twins[who] = {
            str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.name.endswith(".tar")
        }
    assert len([k for k in twins["energon"] if k.endswith(".tar.idx")]) == len(shards)
    assert ".nv-meta/index.sqlite" in twins["energon"]
    assert twins["vlmforge"] == twins["energon"]


def test_a_shard_that_does_not_hold_what_was_written_is_refused(tmp_path: Path) -> None:
    """The publish check compares the keys Energon indexed with the keys written: a shard whose bytes
    changed on disk (here: a sample renamed, same size) is an error, not a published dataset."""
    dest = _written(tmp_path)
    name = "train-scan-000000.tar"
    names = [name]
    root = tmp_path / "tampered"
    root.mkdir()
    data = (dest / name).read_bytes()
    written = indexed_keys(dest, sorted(p.name for p in dest.glob("*.tar")))[name]
    # rename the second sample's members, fixing their header checksums as tarfile would
    renamed = written[1][:-1] + ("x" if written[1][-1] != "x" else "y")
    buf = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as src,
        tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as out,
    ):
        for member in src:
            payload = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.startswith(written[1] + "."):
                member.name = renamed + member.name[len(written[1]) :]
            out.addfile(member, io.BytesIO(payload))
    (root / name).write_bytes(buf.getvalue())
    run_prepare(root, names, [("train", r"train-.*")], 1)
    done = Done(name, "train", written, 0, "", None, False)
    with pytest.raises(EnergonPrepareError, match="first difference at 1"):
        dataset_module._check_shard(done, indexed_keys(root, names)[name], len(written))
    dataset_module._check_shard(done, written, len(written))  # the keys as written pass


@pytest.mark.timeout(120)
def test_a_scan_that_fails_midway_fails_prepare_and_never_hangs_it(tmp_path: Path) -> None:
    """Energon's workers must report every shard back, failed or not, or its aggregator waits forever: a
    shard whose ``.tar.idx`` cannot be written (a folder holds its temporary name) fails the prepare with
    Energon's own verdict, as Energon's scan does."""
    dest = _written(tmp_path)
    shards = sorted(p.name for p in dest.glob("*.tar"))
    (dest / ".nv-meta").mkdir(exist_ok=True)
    for path in dest.glob("*.tar.idx"):
        path.unlink()
    (dest / f"{shards[1]}.idx.tmp").mkdir()
    with pytest.raises(EnergonPrepareError, match="has no samples"):
        run_prepare(dest, shards, [("train", r"train-.*"), ("val", r"val-.*")], 2)


class _Collect(BaseAggregator):
    """Collects the items; ``hold`` runs before the first batch is taken, ``fail_at`` raises at that batch."""

    def __init__(self, hold: Callable[[Any], None] | None = None, fail_at: int | None = None) -> None:
        self.items: list[int] = []
        self.batches = 0
        self.hold, self.fail_at = hold, fail_at

    def on_item(self, items: list[int], aggregator_pool: Any) -> None:
        if self.batches == 0 and self.hold is not None:
            self.hold(aggregator_pool)
        self.batches += 1
        if self.batches == self.fail_at:
            raise RuntimeError("index write failed")
        self.items += items

    def get_final_result_data(self) -> list[int]:
        return self.items


@pytest.mark.timeout(60)
def test_the_inline_worker_waits_for_the_aggregator_instead_of_queueing_every_item() -> None:
    """The scan outruns Energon's SQLite inserts; the items between them stay bounded (an unbounded queue
    held a whole 200,000-sample subset's items at once). The aggregator is held at its first batch until the
    worker can go no further (its queue full) or has produced everything."""
    produced: list[int] = []
    finished = threading.Event()
    backlog: list[int] = []

    def produce(task: int) -> Iterator[int]:
        for i in range(1000):
            produced.append(i)
            yield i
        finished.set()

    def hold(pool: Any) -> None:
        while not finished.is_set() and not pool.result_queue.full():
            finished.wait(0.01)
        backlog.append(len(produced))

    aggregator = _Collect(hold=hold)
    pool = InlineAggregatorPool(
        num_workers=1, user_produce_data=produce, aggregator=aggregator, batch_size=10
    )
    pool.submit_task(0)
    assert pool.process() == list(range(1000))
    # queued batches, the batch the worker is putting, the one it is filling
    assert backlog[0] <= (QUEUED_BATCHES + 2) * 10, backlog


@pytest.mark.timeout(60)
def test_an_aggregator_that_fails_with_the_worker_blocked_on_a_full_queue_never_hangs() -> None:
    """Energon's aggregator (the SQLite index writer) raising while the in-process worker waits on the full
    queue: the pool raises that error, and the worker is let finish instead of waiting forever."""
    pool = InlineAggregatorPool(
        num_workers=1, user_produce_data=lambda task: iter(range(1000)), aggregator=_Collect(fail_at=2)
    )
    pool.submit_task(0)
    with pytest.raises(RuntimeError, match="index write failed"):
        pool.process()


@pytest.mark.timeout(60)
def test_an_inline_worker_that_raises_fails_the_pool_and_never_hangs_it() -> None:
    """The in-process worker raising midway: the pool raises that error once the aggregator has stopped,
    never returns the index of part of the shards, and never waits for a report that cannot come."""

    class Collect(BaseAggregator):
        def __init__(self) -> None:
            self.items: list[int] = []

        def on_item(self, items: list[int], aggregator_pool: object) -> None:
            self.items += items

        def get_final_result_data(self) -> list[int]:
            return self.items

    def produce(task: int) -> Iterator[int]:
        if task == 2:
            raise RuntimeError("shard 2 unreadable")
        yield task

    pool = InlineAggregatorPool(num_workers=1, user_produce_data=produce, aggregator=Collect(), batch_size=1)
    for task in range(4):
        pool.submit_task(task)
    with pytest.raises(RuntimeError, match="shard 2 unreadable"):
        pool.process()

    ok = InlineAggregatorPool(num_workers=1, user_produce_data=lambda t: iter([t, t]), aggregator=Collect())
    for task in range(3):
        ok.submit_task(task)
    assert ok.process() == [0, 0, 1, 1, 2, 2]  # one worker: items in task order, as Energon's pool gives
