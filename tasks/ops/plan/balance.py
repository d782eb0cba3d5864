"""Even visual (encoder) load across the data-parallel ranks of each training step.

A training step gives one pack to each of ``dp`` ranks; the vision encoder's time follows a pack's visual
tokens, so a step is as slow as its heaviest pack. :func:`balance_visual` re-forms the FFD packs so the
packs of each step carry similar visual load; :func:`encoder_load_ratio` measures it (max / mean per step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BalanceReport", "balance_visual", "encoder_load_ratio", "weighted_ratios"]


@dataclass
class BalanceReport:
    """Encoder (visual-token) load per training step across ``dp`` data-parallel ranks, one pack per rank per
    step: the max/mean ratio of the ranks' loads, averaged over the full steps, and the worst step."""

    dp: int
    steps: int = 0  # full steps (dp packs each) measured
    before_mean: float = 1.0
    before_max: float = 1.0
    after_mean: float = 1.0
    after_max: float = 1.0
    swaps: int = 0  # samples exchanged between packs of a step to even it


def encoder_load_ratio(loads: np.ndarray, dp: int) -> tuple[float, float, int]:
    """(mean, max) over full steps of max/mean visual load across the ``dp`` packs of each step, and the
    number of full steps; packs are in step order (pack i goes to step i // dp, rank i % dp)."""
    steps = loads.size // dp
    if steps == 0:
        return 1.0, 1.0, 0
    per = loads[: steps * dp].reshape(steps, dp).astype(np.float64)
    mean = per.mean(axis=1)
    ratio = np.where(mean > 0, per.max(axis=1) / np.where(mean > 0, mean, 1), 1.0)
    return float(ratio.mean()), float(ratio.max()), steps


def weighted_ratios(ratios: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    """Mean (weighted by steps) and max of per-group (mean, max, steps) ratios, and the total steps."""
    steps = sum(s for _, _, s in ratios)
    if steps == 0:
        return 1.0, 1.0, 0
    mean = sum(m * s for m, _, s in ratios) / steps
    return mean, max(x for _, x, s in ratios if s), steps


def balance_visual(
    tokens: np.ndarray, visual: np.ndarray, packs: np.ndarray, seq_len: int, dp: int, *, rounds: int = 8
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Re-form FFD packs (ids 0..n-1, -1 for unplanned) so the packs of each step carry even visual load.

    Packs are ordered by visual load and cut into steps of ``dp`` (similar loads side by side), then within
    each step samples are exchanged between its heaviest and lightest pack while the exchange lowers the
    heavier one's load and both packs still fit ``seq_len`` (``tokens`` are the padded lengths). Steps are
    finally put in a fixed pseudo-random order so heavy steps do not come first. Returns (new pack id of
    every sample, step of every sample, rank of every sample, exchanges made); pack id = step * dp + rank.
    """
    n_packs = int(packs.max()) + 1 if packs.size and packs.max() >= 0 else 0
    if n_packs == 0:
        empty = np.full(packs.shape, -1, dtype=np.int64)
        return empty, empty.copy(), empty.copy(), 0
    state = _Packs(tokens, visual, packs, n_packs, seq_len)
    order = sorted(range(n_packs), key=lambda p: (-int(state.load[p]), p))
    steps = [order[k : k + dp] for k in range(0, n_packs, dp)]
    swaps = sum(state.even(step, rounds) for step in steps)
    new_pack, step_of, rank_of = _renumber(state, steps, packs.shape, n_packs, dp)
    return new_pack, step_of, rank_of, swaps


class _Packs:
    """Members, visual load and used tokens of every pack, changed by exchanges within a step."""

    def __init__(
        self, tokens: np.ndarray, visual: np.ndarray, packs: np.ndarray, n_packs: int, seq_len: int
    ) -> None:
        self.tokens, self.visual, self.seq_len = tokens, visual, seq_len
        self.members: list[list[int]] = [[] for _ in range(n_packs)]
        for i, p in enumerate(packs.tolist()):
            if p >= 0:
                self.members[p].append(i)
        self.load = np.array([int(visual[m].sum()) for m in self.members], dtype=np.int64)
        self.used = np.array([int(tokens[m].sum()) for m in self.members], dtype=np.int64)

    def even(self, step: list[int], rounds: int) -> int:
        """Exchange samples between the heaviest and the lightest pack of ``step`` while that lowers the
        heavier one's load; the number of exchanges."""
        swaps = 0
        for _ in range(rounds * len(step)):
            hi = max(step, key=lambda p: (int(self.load[p]), -p))
            lo = min(step, key=lambda p: (int(self.load[p]), p))
            gap = int(self.load[hi] - self.load[lo])
            if gap <= 0:
                break
            best = self._best_exchange(hi, lo, gap)
            if best is None or best[0] >= int(self.load[hi]):
                break
            _, a, b = best
            self._exchange(hi, lo, a, b)
            swaps += 1
        return swaps

    def _best_exchange(self, hi: int, lo: int, gap: int) -> tuple[int, int, int] | None:
        """(new max of the pair, sample of hi, sample of lo or -1): the exchange that evens the pair most."""
        visual, tokens, used, load = self.visual, self.tokens, self.used, self.load
        best: tuple[int, int, int] | None = None
        for a in self.members[hi]:
            # move a alone, or exchange it with b: delta = visual[a] - visual[b] must be in (0, gap)
            cands = [(-1, 0, 0)] + [(b, int(visual[b]), int(tokens[b])) for b in self.members[lo]]
            for b, vb, tb in cands:
                delta = int(visual[a]) - vb
                if not 0 < delta < gap:
                    continue
                if (
                    used[lo] - tb + int(tokens[a]) > self.seq_len
                    or used[hi] - int(tokens[a]) + tb > self.seq_len
                ):
                    continue
                if b == -1 and len(self.members[hi]) == 1:
                    continue  # never empty a pack
                pair_max = max(int(load[hi]) - delta, int(load[lo]) + delta)
                if best is None or pair_max < best[0]:
                    best = (pair_max, a, b)
        return best

    def _exchange(self, hi: int, lo: int, a: int, b: int) -> None:
        """Move sample ``a`` from pack ``hi`` to ``lo`` (and sample ``b`` back, unless -1)."""
        self.members[hi].remove(a)
        self.members[lo].append(a)
        moved_v, moved_t = int(self.visual[a]), int(self.tokens[a])
        if b >= 0:
            self.members[lo].remove(b)
            self.members[hi].append(b)
            moved_v -= int(self.visual[b])
            moved_t -= int(self.tokens[b])
        self.load[hi] -= moved_v
        self.load[lo] += moved_v
        self.used[hi] -= moved_t
        self.used[lo] += moved_t


def _renumber(
    state: _Packs, steps: list[list[int]], shape: tuple[int, ...], n_packs: int, dp: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pack, step, rank) of every sample once the steps are put in a fixed pseudo-random order (a partial
    step stays last, so pack ids stay dense), heaviest pack first within a step."""
    new_pack = np.full(shape, -1, dtype=np.int64)
    step_of = np.full(shape, -1, dtype=np.int64)
    rank_of = np.full(shape, -1, dtype=np.int64)
    full = len(steps) - (1 if n_packs % dp else 0)
    order_steps = [*np.random.default_rng(0).permutation(full).tolist(), *range(full, len(steps))]
    for new_step, old in enumerate(order_steps):
        for rank, p in enumerate(sorted(steps[old], key=lambda q: (-int(state.load[q]), q))):
            for i in state.members[p]:
                new_pack[i] = new_step * dp + rank
                step_of[i] = new_step
                rank_of[i] = rank
    return new_pack, step_of, rank_of
