"""megatron-energon's own prepare step over a staged dataset: the ``.nv-meta`` index, split and info files.

Only split patterns matching at least one shard are passed (empty splits are omitted from ``split.yaml``):
Energon raises ``EmptyDatasetError`` for a split with an empty shard list and an
``AssertionError("Invalid split part")`` for a missing one, so callers must not load a missing split.
Prepare's failures (it calls ``sys.exit`` on duplicate keys and on a shard it cannot index) become
:class:`EnergonPrepareError`, or :class:`OutputFullError` when the disk was full.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..storage import OutputFullError, no_space
from .samples import EnergonPrepareError

__all__ = ["default_prepare_workers", "indexed_counts", "run_prepare"]


def default_prepare_workers(n_tars: int) -> int:
    """Processes for Energon's prepare: one per CPU, at most one per shard, at most 8."""
    return max(1, min(n_tars, os.cpu_count() or 1, 8))


@contextlib.contextmanager
def _default_sigterm() -> Iterator[None]:
    """SIGTERM with its default action while Energon's prepare runs (main thread only).

    Prepare forks its workers and SIGTERMs them when it fails (e.g. on a full disk). A forked child inherits
    the caller's handler; a Ray worker's raises ``SystemExit``, which, delivered while the child is still in
    ``os.fork()``, sends the child back into the caller's own code as a second copy of the task, and the
    parent then waits for it forever. With the default action a terminated child simply ends.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield  # a handler installed outside Python cannot be restored; other threads cannot set one
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_prepare(root: Path, tar_names: list[str], patterns: Sequence[tuple[str, str]], workers: int) -> None:
    """Energon's ``prepare_dataset`` over ``tar_names`` in ``root`` with (split, regex) ``patterns``."""
    from megatron.energon import BaseWebdatasetFactory

    try:
        with _default_sigterm():
            BaseWebdatasetFactory.prepare_dataset(
                root, tar_names, split_parts_patterns=list(patterns), shuffle_seed=None, workers=workers
            )
    except OSError as exc:
        full = no_space(exc, str(root))
        if full is None:
            raise
        raise full from exc
    except SystemExit as exc:  # energon calls sys.exit(1) on duplicate keys, and when a shard failed to index
        if _nearly_full(root):  # the failure was the disk's (logged by energon), not the samples'
            raise OutputFullError(
                f"no space left on the output volume while megatron-energon indexed {root}: free space and "
                "rerun the same command; committed work is kept and resumed"
            ) from exc
        raise EnergonPrepareError(
            f"megatron-energon prepare exited with status {exc.code} for {root}"
        ) from exc
    except AssertionError as exc:  # e.g. "Shard X has no samples."
        raise EnergonPrepareError(f"megatron-energon prepare failed for {root}: {exc}") from exc


def _nearly_full(path: Path, margin: int = 1 << 20) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def indexed_counts(root: Path, tar_names: list[str]) -> dict[str, int]:
    """Samples per shard as Energon's ``.info.json`` counts them; it must index exactly ``tar_names``."""
    info = json.loads((root / ".nv-meta" / ".info.json").read_text(encoding="utf-8"))
    shard_counts: dict[str, int] = info.get("shard_counts", {})
    if list(shard_counts) != tar_names:
        raise EnergonPrepareError(f"energon indexed {sorted(shard_counts)}, expected {tar_names}")
    return shard_counts
