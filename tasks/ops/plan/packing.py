"""Sequence plan: pack the ok samples into sequences of ``seq_len`` tokens, first-fit-decreasing.

Lengths are ``total_tokens`` rounded up to ``pad_multiple`` (Megatron-Bridge packs
``ceil_to_multiple(len, pad_to_multiple_of)`` with ``first_fit_decreasing``); a sample is never split, and one
longer than ``seq_len`` after rounding is left out of the plan (counted as ``too_long``). Packs never mix
splits (train / val); ``scope="subset"`` packs every subset on its own, ``scope="mix"`` packs the selected
subsets together. The plan is the manifest table ``plan`` (:mod:`.table`), one row per planned sample, so
``SELECT pack, sum(tokens) FROM plan GROUP BY pack`` works. The packing is :mod:`.ffd`; the optional
visual-load balancing across data-parallel ranks is :mod:`.balance`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from ....schemas.tables import PLAN
from ...errors import ConfigError
from .balance import BalanceReport, balance_visual, encoder_load_ratio, weighted_ratios
from .ffd import first_fit_decreasing, pack_stats
from .table import write_plan

__all__ = ["GroupPlan", "PlanResult", "build_plan"]

Scope = Literal["subset", "mix"]
Balance = Literal["none", "visual"]


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
    _check_options(seq_len, pad_multiple, scope, balance, dp)
    samples = _Samples.read(out, subsets, pad_multiple)
    planner = _Planner(samples, seq_len, dp, balance == "visual")
    result = PlanResult(out=out, seq_len=seq_len, pad_multiple=pad_multiple, scope=scope)
    result.groups = [planner.plan(name, split, rows) for name, split, rows in samples.groups(scope)]
    result.balance = planner.balance_report()
    table = planner.table(scope)
    result.paths = write_plan(out, table.cast(PLAN), seq_len, pad_multiple, scope)
    return result


def _check_options(seq_len: int, pad_multiple: int, scope: str, balance: str, dp: int) -> None:
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


@dataclass
class _Samples:
    """The ok samples to plan (subset, line order) and their columns as arrays."""

    table: pa.Table
    subset: np.ndarray
    split: np.ndarray
    tokens: np.ndarray
    padded: np.ndarray
    visual: np.ndarray

    @classmethod
    def read(cls, out: str, subsets: Sequence[str] | None, pad_multiple: int) -> _Samples:
        table = _read_ok_samples(out, subsets)
        if subsets:
            missing = sorted(set(subsets) - set(table.column("subset").to_pylist()))
            if missing:
                raise ConfigError(f"no ok samples for subset(s) {', '.join(missing)} in {out}")
        tokens = table.column("total_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
        return cls(
            table=table,
            subset=np.asarray(table.column("subset").to_pylist(), dtype=object),
            split=np.asarray(table.column("split").to_pylist(), dtype=object),
            tokens=tokens,
            padded=-(-tokens // pad_multiple) * pad_multiple,
            visual=table.column("visual_tokens").to_numpy(zero_copy_only=False).astype(np.int64),
        )

    def groups(self, scope: Scope) -> Iterator[tuple[str, str, np.ndarray]]:
        """(name, split, rows) of every packing run: per subset (or the whole mix), train first."""
        n = self.tokens.size
        names = sorted(set(self.subset.tolist())) if scope == "subset" else ["mix"]
        for name in names:
            in_name = self.subset == name if scope == "subset" else np.ones(n, dtype=bool)
            for split in sorted(set(self.split[in_name].tolist()), key=lambda s: (s != "train", s)):
                yield name, split, np.flatnonzero(in_name & (self.split == split))


def _read_ok_samples(out: str, subsets: Sequence[str] | None) -> pa.Table:
    from ..query import connect

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


class _Planner:
    """Packs the groups one after the other (pack ids continue across groups) and keeps every sample's
    pack, index and offset in its pack, and with balancing its step and rank."""

    def __init__(self, samples: _Samples, seq_len: int, dp: int, balance: bool) -> None:
        n = samples.tokens.size
        self.samples, self.seq_len, self.dp = samples, seq_len, dp
        self.report = BalanceReport(dp=dp) if balance else None
        self.before: list[tuple[float, float, int]] = []
        self.after: list[tuple[float, float, int]] = []
        self.pack, self.index, self.offset, self.step, self.rank = (
            np.full(n, -1, dtype=np.int64) for _ in range(5)
        )
        self.next_pack = 0

    def plan(self, name: str, split: str, rows: np.ndarray) -> GroupPlan:
        s = self.samples
        ids = first_fit_decreasing(s.padded[rows], self.seq_len)
        fits = ids >= 0
        if self.report is not None:
            ids = self._balance(rows, ids, fits, self.report)
        ids[fits] += self.next_pack
        idx, off = pack_stats(s.padded[rows], ids)
        self.pack[rows], self.index[rows], self.offset[rows] = ids, idx, off
        group = GroupPlan(name=name, split=split)
        group.samples = int(fits.sum())
        group.too_long = int((~fits).sum())
        group.packs = int(ids[fits].max() - self.next_pack + 1) if group.samples else 0
        group.tokens = int(s.tokens[rows][fits].sum())
        group.padded_tokens = int(s.padded[rows][fits].sum())
        self.next_pack += group.packs
        if self.report is not None:  # every group starts on a step boundary
            self.next_pack = -(-self.next_pack // self.dp) * self.dp
        return group

    def _balance(
        self, rows: np.ndarray, ids: np.ndarray, fits: np.ndarray, report: BalanceReport
    ) -> np.ndarray:
        """The group's packs re-formed by :func:`balance_visual`, with the encoder load before and after."""
        s, dp = self.samples, self.dp
        n_group = int(ids.max()) + 1 if fits.any() else 0
        loads = np.bincount(ids[fits], weights=s.visual[rows][fits], minlength=n_group)
        self.before.append(encoder_load_ratio(loads, dp))
        ids, st, rk, swaps = balance_visual(s.padded[rows], s.visual[rows], ids, self.seq_len, dp)
        report.swaps += swaps
        loads = np.bincount(ids[fits], weights=s.visual[rows][fits], minlength=n_group)
        self.after.append(encoder_load_ratio(loads, dp))
        self.step[rows] = np.where(fits, st + (self.next_pack // dp if dp else 0), -1)
        self.rank[rows] = rk
        return ids

    def balance_report(self) -> BalanceReport | None:
        report = self.report
        if report is not None:
            report.before_mean, report.before_max, report.steps = weighted_ratios(self.before)
            report.after_mean, report.after_max, _ = weighted_ratios(self.after)
        return report

    def table(self, scope: Scope) -> pa.Table:
        """The planned samples as plan rows (before the cast to :data:`PLAN`)."""
        s, n, balanced = self.samples, self.samples.tokens.size, self.report is not None
        return pa.table(
            {
                "subset": s.table.column("subset"),
                "sample_id": s.table.column("sample_id"),
                "line": s.table.column("line"),
                "key": s.table.column("key"),
                "split": s.table.column("split"),
                "tokens": pa.array(s.tokens, pa.int64()),
                "padded_tokens": pa.array(s.padded, pa.int64()),
                "pack": pa.array(self.pack, pa.int64()),
                "pack_index": pa.array(self.index.astype(np.int32), pa.int32()),
                "pack_offset": pa.array(self.offset, pa.int64()),
                "scope": pa.array([scope] * n, pa.string()),
                "seq_len": pa.array(np.full(n, self.seq_len, dtype=np.int64), pa.int64()),
                "visual_tokens": pa.array(s.visual if balanced else [None] * n, pa.int64()),
                "step": pa.array(self.step if balanced else [None] * n, pa.int64()),
                "rank": pa.array(self.rank.astype(np.int32) if balanced else [None] * n, pa.int32()),
            }
        ).filter(pa.array(self.pack >= 0))
