"""Exact first-fit-decreasing packing, fast: a run of equal lengths at a time.

:func:`first_fit_decreasing` is exact FFD (each item, longest first, ties in input order, goes to the
lowest-numbered pack with room) computed a run of equal lengths at a time: a pack with ``room`` takes
``room // length`` consecutive items of a run, so every run costs numpy work over the packs that still have
room instead of Python work per item. A room index keeps the largest room per block of packs, so blocks
without room for the run are skipped.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["first_fit_decreasing", "pack_stats"]

_BLOCK = 1024  # packs per block of the room index


def first_fit_decreasing(lengths: Sequence[int] | np.ndarray, capacity: int) -> np.ndarray:
    """Pack id (0, 1, ... in order of opening) of every item; -1 for items longer than ``capacity``.

    Exactly first-fit-decreasing: items sorted by length, longest first, equal lengths in input order; each
    goes to the lowest-numbered open pack with ``room >= length``, else opens a pack. Lengths must be >= 1.
    """
    if capacity <= 0:
        raise ValueError(f"capacity must be > 0, got {capacity}")
    lens = np.asarray(lengths, dtype=np.int64)
    packs = np.full(lens.shape, -1, dtype=np.int64)
    if lens.size == 0:
        return packs
    if int(lens.min()) < 1:
        raise ValueError("item lengths must be >= 1")
    fits = np.flatnonzero(lens <= capacity)
    order = fits[np.argsort(-lens[fits], kind="stable")]
    if order.size == 0:
        return packs
    packs[order] = _Packer(lens[order], capacity).run()
    return packs


class _Packer:
    """FFD over lengths sorted longest first: the pack of each item, one run of equal lengths at a time."""

    def __init__(self, sorted_len: np.ndarray, capacity: int) -> None:
        n = sorted_len.size
        self.sorted_len, self.capacity = sorted_len, capacity
        self.room = np.zeros(n, dtype=np.int64)  # at most one pack per item
        self.block_max = np.full((n + _BLOCK - 1) // _BLOCK, -1, dtype=np.int64)  # max room per block
        self.assigned = np.empty(n, dtype=np.int64)  # pack of each sorted item
        self.n_packs = 0

    def run(self) -> np.ndarray:
        sorted_len, n = self.sorted_len, self.sorted_len.size
        starts = np.flatnonzero(np.r_[True, sorted_len[1:] != sorted_len[:-1]])
        ends = np.r_[starts[1:], n]
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            size = int(sorted_len[start])
            pos, left = self._fill_open(size, start, end - start)
            if left:
                self._open_new(size, pos, end, left)
        return self.assigned

    def _fill_open(self, size: int, pos: int, left: int) -> tuple[int, int]:
        """Place items of length ``size`` into open packs with room, lowest first; (next item, items left)."""
        if not self.n_packs:
            return pos, left
        room, n_packs = self.room, self.n_packs
        used_blocks = (n_packs + _BLOCK - 1) // _BLOCK
        for b in np.flatnonzero(self.block_max[:used_blocks] >= size).tolist():
            lo, hi = b * _BLOCK, min((b + 1) * _BLOCK, n_packs)
            block = room[lo:hi]
            open_ = np.flatnonzero(block >= size)
            takes = block[open_] // size
            total = np.cumsum(takes)
            if int(total[-1]) >= left:
                k = int(np.searchsorted(total, left))
                open_, takes = open_[: k + 1], takes[: k + 1].copy()
                takes[k] -= int(total[k]) - left
            placed = int(takes.sum())
            ids = lo + open_
            self.assigned[pos : pos + placed] = np.repeat(ids, takes)
            room[ids] -= takes * size
            self.block_max[b] = int(room[lo:hi].max())
            pos += placed
            left -= placed
            if left == 0:
                break
        return pos, left

    def _open_new(self, size: int, pos: int, end: int, left: int) -> None:
        """Open as many packs as the ``left`` items of length ``size`` need, each filled in turn."""
        per = self.capacity // size
        count = -(-left // per)
        takes = np.full(count, per, dtype=np.int64)
        takes[-1] = left - per * (count - 1)
        first = self.n_packs
        ids = np.arange(first, first + count, dtype=np.int64)
        self.assigned[pos:end] = np.repeat(ids, takes)
        self.room[first : first + count] = self.capacity - takes * size
        first_block, last_block = first // _BLOCK, (first + count - 1) // _BLOCK
        self.n_packs += count
        for b in range(first_block, last_block + 1):
            self.block_max[b] = int(self.room[b * _BLOCK : min((b + 1) * _BLOCK, self.n_packs)].max())


def pack_stats(lengths: np.ndarray, packs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index within its pack, token offset within its pack) of every item, in FFD placement order (the
    order the items entered the pack: longest first). Items with pack -1 get -1."""
    n = lengths.size
    index = np.full(n, -1, dtype=np.int64)
    offset = np.full(n, -1, dtype=np.int64)
    placed = np.flatnonzero(packs >= 0)
    if placed.size == 0:
        return index, offset
    # placement order inside a pack = FFD order: length descending, then input position
    order = placed[np.lexsort((placed, -lengths[placed], packs[placed]))]
    p = packs[order]
    first = np.r_[True, p[1:] != p[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    index[order] = np.arange(order.size) - group_start
    cum = np.cumsum(lengths[order]) - lengths[order]
    offset[order] = cum - cum[group_start]
    return index, offset
