"""Sequence plan: pack the ok samples into sequences of ``seq_len`` tokens, first-fit-decreasing.

Lengths are ``total_tokens`` rounded up to ``pad_multiple`` (Megatron-Bridge packs
``ceil_to_multiple(len, pad_to_multiple_of)`` with ``first_fit_decreasing``); a sample is never split, and one
longer than ``seq_len`` after rounding is left out of the plan (counted as ``too_long``). Packs never mix
splits (train / val); ``scope="subset"`` packs every subset on its own, ``scope="mix"`` packs the selected
subsets together. The plan is the manifest table ``plan``
(``OUT/manifests/plan/subset=<name>/part-00000.parquet``, schema :data:`PLAN`), one row per planned sample,
so ``SELECT pack, sum(tokens) FROM plan GROUP BY pack`` works.

:func:`first_fit_decreasing` is exact FFD (each item, longest first, ties in input order, goes to the
lowest-numbered pack with room) computed a run of equal lengths at a time: a pack with ``room`` takes
``room // length`` consecutive items of a run, so every run costs numpy work over the packs that still have
room instead of Python work per item.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...schemas.manifests import PLAN
from ..errors import ConfigError
from ..manifests import OutputLayout
from ..storage import atomic_write_bytes

__all__ = [
    "PLAN",
    "BalanceReport",
    "GroupPlan",
    "balance_visual",
    "encoder_load_ratio",
    "PlanResult",
    "build_plan",
    "first_fit_decreasing",
    "pack_order",
    "pack_stats",
    "read_plan",
]

Scope = Literal["subset", "mix"]
Balance = Literal["none", "visual"]

_META_KEY = b"vlmforge.plan"
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
    sorted_len = lens[order]
    n = order.size
    if n == 0:
        return packs
    room = np.zeros(n, dtype=np.int64)  # at most one pack per item
    block_max = np.full((n + _BLOCK - 1) // _BLOCK, -1, dtype=np.int64)  # max room per block of packs
    assigned = np.empty(n, dtype=np.int64)  # pack of each sorted item
    n_packs = 0
    starts = np.flatnonzero(np.r_[True, sorted_len[1:] != sorted_len[:-1]])
    ends = np.r_[starts[1:], n]
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        size = int(sorted_len[start])
        pos, left = start, end - start
        if n_packs:
            used_blocks = (n_packs + _BLOCK - 1) // _BLOCK
            for b in np.flatnonzero(block_max[:used_blocks] >= size).tolist():
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
                assigned[pos : pos + placed] = np.repeat(ids, takes)
                room[ids] -= takes * size
                block_max[b] = int(room[lo:hi].max())
                pos += placed
                left -= placed
                if left == 0:
                    break
        if left:
            per = capacity // size
            count = -(-left // per)
            takes = np.full(count, per, dtype=np.int64)
            takes[-1] = left - per * (count - 1)
            ids = np.arange(n_packs, n_packs + count, dtype=np.int64)
            assigned[pos:end] = np.repeat(ids, takes)
            room[n_packs : n_packs + count] = capacity - takes * size
            first_block, last_block = n_packs // _BLOCK, (n_packs + count - 1) // _BLOCK
            n_packs += count
            for b in range(first_block, last_block + 1):
                block_max[b] = int(room[b * _BLOCK : min((b + 1) * _BLOCK, n_packs)].max())
    packs[order] = assigned
    return packs


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


@dataclass
class GroupPlan:
    """One packing run: a subset's (or the mix's) samples of one split."""

    name: str  # subset name, or "mix"
    split: str
    samples: int = 0  # samples planned
    too_long: int = 0  # ok samples longer than seq_len after rounding (not planned)
    packs: int = 0
    tokens: int = 0  # sum of total_tokens of planned samples
    padded_tokens: int = 0  # sum of the rounded lengths

    def capacity(self, seq_len: int) -> int:
        return self.packs * seq_len


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
    new_pack = np.full(packs.shape, -1, dtype=np.int64)
    step_of = np.full(packs.shape, -1, dtype=np.int64)
    rank_of = np.full(packs.shape, -1, dtype=np.int64)
    if n_packs == 0:
        return new_pack, step_of, rank_of, 0
    members: list[list[int]] = [[] for _ in range(n_packs)]
    for i, p in enumerate(packs.tolist()):
        if p >= 0:
            members[p].append(i)
    load = np.array([int(visual[m].sum()) for m in members], dtype=np.int64)
    used = np.array([int(tokens[m].sum()) for m in members], dtype=np.int64)
    order = sorted(range(n_packs), key=lambda p: (-int(load[p]), p))
    steps = [order[k : k + dp] for k in range(0, n_packs, dp)]
    swaps = 0
    for step in steps:
        for _ in range(rounds * len(step)):
            hi = max(step, key=lambda p: (int(load[p]), -p))
            lo = min(step, key=lambda p: (int(load[p]), p))
            gap = int(load[hi] - load[lo])
            if gap <= 0:
                break
            best: tuple[int, int, int] | None = (
                None  # (new max of the pair, sample of hi, sample of lo or -1)
            )
            for a in members[hi]:
                # move a alone, or exchange it with b: delta = visual[a] - visual[b] must be in (0, gap)
                cands = [(-1, 0, 0)] + [(b, int(visual[b]), int(tokens[b])) for b in members[lo]]
                for b, vb, tb in cands:
                    delta = int(visual[a]) - vb
                    if not 0 < delta < gap:
                        continue
                    if used[lo] - tb + int(tokens[a]) > seq_len or used[hi] - int(tokens[a]) + tb > seq_len:
                        continue
                    if b == -1 and len(members[hi]) == 1:
                        continue  # never empty a pack
                    pair_max = max(int(load[hi]) - delta, int(load[lo]) + delta)
                    if best is None or pair_max < best[0]:
                        best = (pair_max, a, b)
            if best is None or best[0] >= int(load[hi]):
                break
            _, a, b = best
            members[hi].remove(a)
            members[lo].append(a)
            moved_v, moved_t = int(visual[a]), int(tokens[a])
            if b >= 0:
                members[lo].remove(b)
                members[hi].append(b)
                moved_v -= int(visual[b])
                moved_t -= int(tokens[b])
            load[hi] -= moved_v
            load[lo] += moved_v
            used[hi] -= moved_t
            used[lo] += moved_t
            swaps += 1
    full = len(steps) - (1 if n_packs % dp else 0)  # a partial step stays last: pack ids stay dense
    order_steps = [*np.random.default_rng(0).permutation(full).tolist(), *range(full, len(steps))]
    for new_step, old in enumerate(order_steps):
        for rank, p in enumerate(sorted(steps[old], key=lambda q: (-int(load[q]), q))):
            for i in members[p]:
                new_pack[i] = new_step * dp + rank
                step_of[i] = new_step
                rank_of[i] = rank
    return new_pack, step_of, rank_of, swaps


@dataclass
class PlanResult:
    out: str
    seq_len: int
    pad_multiple: int
    scope: Scope
    groups: list[GroupPlan] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    balance: BalanceReport | None = None  # with balance="visual"

    @property
    def samples(self) -> int:
        return sum(g.samples for g in self.groups)

    @property
    def packs(self) -> int:
        return sum(g.packs for g in self.groups)

    @property
    def tokens(self) -> int:
        return sum(g.tokens for g in self.groups)

    @property
    def padded_tokens(self) -> int:
        return sum(g.padded_tokens for g in self.groups)

    @property
    def too_long(self) -> int:
        return sum(g.too_long for g in self.groups)

    @property
    def efficiency(self) -> float:
        """tokens / (packs x seq_len): the share of the packed sequences that is real tokens."""
        cap = self.packs * self.seq_len
        return self.tokens / cap if cap else 0.0

    @property
    def padding_waste(self) -> float:
        """Share of the packed sequences spent on rounding each sample up to ``pad_multiple``."""
        cap = self.packs * self.seq_len
        return (self.padded_tokens - self.tokens) / cap if cap else 0.0

    @property
    def tail_waste(self) -> float:
        """Share of the packed sequences left empty at the end of packs."""
        cap = self.packs * self.seq_len
        return (cap - self.padded_tokens) / cap if cap else 0.0


def _read_ok_samples(out: str, subsets: Sequence[str] | None) -> pa.Table:
    from .query import connect

    con = connect(out)
    try:
        sql = (
            "SELECT subset, sample_id, line, key, coalesce(split, 'train') AS split, total_tokens, "
            "coalesce(visual_tokens, 0) AS visual_tokens "
            "FROM samples WHERE status = 'ok'"
        )
        params: list[object] = []
        if subsets:
            sql += " AND subset IN (SELECT unnest(?))"
            params.append(list(subsets))
        sql += " ORDER BY subset, line"
        table: pa.Table = con.sql(sql, params=params or None).to_arrow_table()
    finally:
        con.close()
    return table


def build_plan(
    out: str,
    seq_len: int,
    *,
    pad_multiple: int = 1,
    scope: Scope = "subset",
    subsets: Sequence[str] | None = None,
    balance: Balance = "none",
    dp: int = 8,
) -> PlanResult:
    """Pack the ok samples of ``out`` (all subsets, or ``subsets``) and write the ``plan`` table.

    With ``balance="visual"`` the packs of each group are re-formed so that each training step's ``dp``
    packs (one per data-parallel rank) carry even visual-token load (:func:`balance_visual`); the result's
    ``balance`` reports the max/mean encoder load ratio per step before and after, and the plan gets the
    ``visual_tokens``, ``step`` and ``rank`` columns.

    The previous plan is replaced: every subset of this plan gets a new part, written atomically; parts of
    subsets left out of it are removed."""
    if balance not in ("none", "visual"):
        raise ConfigError(f"unknown balance {balance!r}; expected 'none' or 'visual'")
    if dp <= 0:
        raise ConfigError(f"--dp must be > 0, got {dp}")
    if seq_len <= 0:
        raise ConfigError(f"--seq-len must be > 0, got {seq_len}")
    if pad_multiple <= 0:
        raise ConfigError(f"--pad-multiple must be > 0, got {pad_multiple}")
    if scope not in ("subset", "mix"):
        raise ConfigError(f"unknown plan scope {scope!r}; expected 'subset' or 'mix'")
    table = _read_ok_samples(out, subsets)
    if subsets:
        missing = sorted(set(subsets) - set(table.column("subset").to_pylist()))
        if missing:
            raise ConfigError(f"no ok samples for subset(s) {', '.join(missing)} in {out}")
    subset_col = np.asarray(table.column("subset").to_pylist(), dtype=object)
    split_col = np.asarray(table.column("split").to_pylist(), dtype=object)
    tokens = table.column("total_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    padded = -(-tokens // pad_multiple) * pad_multiple
    visual = table.column("visual_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    n = tokens.size
    step = np.full(n, -1, dtype=np.int64)
    rank = np.full(n, -1, dtype=np.int64)
    report = BalanceReport(dp=dp) if balance == "visual" else None
    before_ratios: list[tuple[float, float, int]] = []
    after_ratios: list[tuple[float, float, int]] = []
    pack = np.full(n, -1, dtype=np.int64)
    index = np.full(n, -1, dtype=np.int64)
    offset = np.full(n, -1, dtype=np.int64)
    result = PlanResult(out=out, seq_len=seq_len, pad_multiple=pad_multiple, scope=scope)
    names = sorted(set(subset_col.tolist())) if scope == "subset" else ["mix"]
    next_pack = 0
    for name in names:
        in_name = subset_col == name if scope == "subset" else np.ones(n, dtype=bool)
        for split in sorted(set(split_col[in_name].tolist()), key=lambda s: (s != "train", s)):
            rows = np.flatnonzero(in_name & (split_col == split))
            group = GroupPlan(name=name, split=split)
            ids = first_fit_decreasing(padded[rows], seq_len)
            fits = ids >= 0
            if report is not None:
                n_group = int(ids.max()) + 1 if fits.any() else 0
                loads = np.bincount(ids[fits], weights=visual[rows][fits], minlength=n_group)
                before_ratios.append(encoder_load_ratio(loads, dp))
                ids, st, rk, swaps = balance_visual(padded[rows], visual[rows], ids, seq_len, dp)
                report.swaps += swaps
                loads = np.bincount(ids[fits], weights=visual[rows][fits], minlength=n_group)
                after_ratios.append(encoder_load_ratio(loads, dp))
                step[rows] = np.where(fits, st + (next_pack // dp if dp else 0), -1)
                rank[rows] = rk
            ids[fits] += next_pack
            idx, off = pack_stats(padded[rows], ids)
            pack[rows], index[rows], offset[rows] = ids, idx, off
            group.samples = int(fits.sum())
            group.too_long = int((~fits).sum())
            group.packs = int(ids[fits].max() - next_pack + 1) if group.samples else 0
            group.tokens = int(tokens[rows][fits].sum())
            group.padded_tokens = int(padded[rows][fits].sum())
            next_pack += group.packs
            if report is not None:  # every group starts on a step boundary
                next_pack = -(-next_pack // dp) * dp
            result.groups.append(group)
    if report is not None:
        report.before_mean, report.before_max, report.steps = _weighted(before_ratios)
        report.after_mean, report.after_max, _ = _weighted(after_ratios)
        result.balance = report
    planned = pack >= 0
    full = pa.table(
        {
            "subset": table.column("subset"),
            "sample_id": table.column("sample_id"),
            "line": table.column("line"),
            "key": table.column("key"),
            "split": table.column("split"),
            "tokens": pa.array(tokens, pa.int64()),
            "padded_tokens": pa.array(padded, pa.int64()),
            "pack": pa.array(pack, pa.int64()),
            "pack_index": pa.array(index.astype(np.int32), pa.int32()),
            "pack_offset": pa.array(offset, pa.int64()),
            "scope": pa.array([scope] * n, pa.string()),
            "seq_len": pa.array(np.full(n, seq_len, dtype=np.int64), pa.int64()),
            "visual_tokens": pa.array(visual if report is not None else [None] * n, pa.int64()),
            "step": pa.array(step if report is not None else [None] * n, pa.int64()),
            "rank": pa.array(rank.astype(np.int32) if report is not None else [None] * n, pa.int32()),
        }
    ).filter(pa.array(planned))
    result.paths = _write_plan(out, full.cast(PLAN), seq_len, pad_multiple, scope)
    return result


def _weighted(ratios: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    """Mean (weighted by steps) and max of per-group (mean, max, steps) ratios, and the total steps."""
    steps = sum(s for _, _, s in ratios)
    if steps == 0:
        return 1.0, 1.0, 0
    mean = sum(m * s for m, _, s in ratios) / steps
    return mean, max(x for _, x, s in ratios if s), steps


def _write_plan(out: str, table: pa.Table, seq_len: int, pad_multiple: int, scope: Scope) -> list[str]:
    layout = OutputLayout(out)
    meta = f'{{"seq_len": {seq_len}, "pad_multiple": {pad_multiple}, "scope": "{scope}"}}'.encode()
    paths: list[str] = []
    subsets = sorted(set(table.column("subset").to_pylist()))
    for subset in subsets:
        part = table.filter(pc.equal(table["subset"], subset))
        part = part.sort_by([("pack", "ascending"), ("pack_index", "ascending")])
        buf = io.BytesIO()
        pq.write_table(part.replace_schema_metadata({_META_KEY: meta}), buf, compression="zstd")
        path = layout.part("plan", subset, 0)
        atomic_write_bytes(layout.fs, path, buf.getvalue())
        paths.append(path)
    for stale in set(layout.subsets_with("plan")) - set(subsets):
        for p in layout.parts("plan", stale):
            layout.fs.rm(p)
    return paths


def read_plan(out: str, subset: str) -> pa.Table:
    """The plan rows of ``subset`` in pack order (an empty table with :data:`PLAN` when there is none)."""
    layout = OutputLayout(out)
    parts = layout.parts("plan", subset)
    if not parts:
        return PLAN.empty_table()
    tables = []
    for p in parts:
        with layout.fs.open(p, "rb") as f:
            tables.append(pq.read_table(f, schema=PLAN).replace_schema_metadata(None))
    return pa.concat_tables(tables).sort_by([("pack", "ascending"), ("pack_index", "ascending")])


def pack_order(out: str, subset: str) -> dict[int, tuple[int, int]]:
    """``line -> (pack, pack_index)`` of the planned samples of ``subset``: the sort key that writes shards
    in pack order (samples left out of the plan have no entry: put them last, in line order)."""
    plan = read_plan(out, subset)
    return {
        line: (p, i)
        for line, p, i in zip(
            plan.column("line").to_pylist(),
            plan.column("pack").to_pylist(),
            plan.column("pack_index").to_pylist(),
            strict=True,
        )
    }
