"""Energon's prepare with one worker, run in this process instead of a forked child.

Energon's :class:`AggregatorPool` forks every worker, one included. Forked from a Ray worker that has
resized images and imported torch, a child starts with the parent's ~0.6-0.9 GB resident (shared until
written, but counted in full by every tool that sums RSS), only to scan one or two small shards: our scan
takes 0.8 s of CPU per 10,000-sample shard (:mod:`.shard_scan`). With one worker,
:class:`InlineAggregatorPool` runs Energon's own worker loop on a thread of this process and Energon's own
aggregator on the calling thread, over an in-process queue: same items, same order (one worker), same
files, no fork, and a bounded queue between them. With more workers it is Energon's pool unchanged.

Energon builds its pool inside ``prepare_dataset`` by the module name ``AggregatorPool``, with no hook to
pass another; :func:`inline_single_worker` swaps that name for the duration of one prepare (under a lock,
so concurrent prepares in one process each see a consistent pool).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any

from megatron.energon.flavors.webdataset import prepare as energon_prepare
from megatron.energon.flavors.webdataset.aggregator_pool import AggregatorPool

__all__ = ["InlineAggregatorPool", "inline_single_worker"]

_swap_lock = threading.Lock()
#: Batches of items (Energon's ``INDEX_BATCH_SIZE`` each) waiting for the aggregator at most.
QUEUED_BATCHES = 4


class InlineAggregatorPool(AggregatorPool):
    """Energon's pool; with ``num_workers == 1`` its worker loop runs on a thread of this process."""

    def process(self) -> Any:
        if self.num_workers != 1:
            return super().process()
        # In-process (nothing is pickled) and bounded: the scan outruns the SQLite inserts, and an unbounded
        # queue held every item of a 200,000-sample subset at once (~0.2 GB), where a forked worker's queue
        # is bounded by its pipe.
        self.result_queue = queue.Queue[Any](maxsize=QUEUED_BATCHES)
        failure: list[BaseException] = []

        def work() -> None:
            try:
                self._worker(0)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller below
                failure.append(exc)
                self.result_queue.put(None)  # the aggregator stops waiting; the failure is raised below

        self.task_queue.put(None)
        worker = threading.Thread(target=work, name="energon-prepare-worker", daemon=True)
        worker.start()
        try:
            result = self._aggregator_run()
        finally:
            # When the aggregator failed, the worker may be blocked on a full queue: take its batches
            # until it ends (after a success it has ended already, its last put being the end marker).
            while worker.is_alive():
                with contextlib.suppress(queue.Empty):
                    self.result_queue.get(timeout=0.05)
            worker.join()
        if failure:  # an index from part of the shards must never be taken for the whole
            raise failure[0]
        return result


@contextlib.contextmanager
def inline_single_worker() -> Iterator[None]:
    """Energon's ``prepare_dataset`` builds :class:`InlineAggregatorPool` within the block."""
    with _swap_lock:
        original = energon_prepare.AggregatorPool
        energon_prepare.AggregatorPool = InlineAggregatorPool
        try:
            yield
        finally:
            energon_prepare.AggregatorPool = original
