"""The plan of a release of Nemotron Image Training v3's shape: how many subsets, how many rows each
(long-tailed, Zipf-like), and what kind of rows each holds.

v3 has 76 subsets whose sizes fall off steeply from the largest to a long tail of small ones, most with one
image a row, some with several, a few with videos, some text only; media partly in the release's own tars,
mostly behind upstream recipes. A *mix* says which kind each subset gets (one entry in :data:`MIXES` per
mix, a function of the subset's rank): ``v3`` all kinds interleaved over the ranks, so large and small
subsets of every kind exist; ``images`` every subset one upstream image a row (the benchmark against
img2dataset on the same URLs); ``text`` every subset text only (rows/s without media).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["KINDS", "MIXES", "SUBSETS_V3", "SubsetPlan", "plan_release", "zipf_sizes"]

SUBSETS_V3: Final[int] = 76
ZIPF_EXPONENT: Final[float] = 1.0

#: What a subset's rows hold (each kind is written by one row builder in :mod:`.shaped`).
KINDS: Final[tuple[str, ...]] = ("image", "multi", "tar", "video", "text")


def _v3_kind(rank: int) -> str:
    """Every kind at large and small ranks: two video subsets, text every 7th, release tars every 5th,
    several images every 4th, one upstream image a row otherwise."""
    if rank in (5, 37):
        return "video"
    if rank % 7 == 3:
        return "text"
    if rank % 5 == 1:
        return "tar"
    if rank % 4 == 2:
        return "multi"
    return "image"


#: Mix name -> the kind of the subset at a rank (0 the largest).
MIXES: Final[dict[str, Callable[[int], str]]] = {
    "v3": _v3_kind,
    "images": lambda rank: "image",
    "text": lambda rank: "text",
}


@dataclass(frozen=True)
class SubsetPlan:
    """One subset of the plan: its rank by size, name, kind and row count."""

    rank: int
    name: str
    kind: str
    rows: int


def zipf_sizes(total: int, n: int, exponent: float = ZIPF_EXPONENT) -> list[int]:
    """``n`` sizes summing to ``total``, the k-th proportional to 1/(k+1)**exponent, each at least 1 (when
    ``total >= n``); what rounding leaves over goes to the largest. Largest first."""
    if n <= 0:
        raise ValueError("a release has at least one subset")
    if total < n:
        return [1] * total + [0] * (n - total)
    weights = [1.0 / (k + 1) ** exponent for k in range(n)]
    scale = total / sum(weights)
    sizes = [max(1, int(w * scale)) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


def plan_release(rows: int, *, mix: str = "v3", subsets: int = SUBSETS_V3) -> list[SubsetPlan]:
    """The subsets of a ``rows``-row release of ``mix`` (a key of :data:`MIXES`), largest first."""
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
    kind_of = MIXES[mix]
    plans = []
    for rank, size in enumerate(zipf_sizes(rows, subsets)):
        kind = kind_of(rank)
        plans.append(SubsetPlan(rank, f"s{rank:02d}_{kind}", kind, size))
    return plans
