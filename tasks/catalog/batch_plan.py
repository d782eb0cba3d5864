"""The batch plan of a subset: where each batch starts (byte offset and line), sized by work, not lines only.

A batch closes at ``batch_lines`` lines or when its next line would take it past ``batch_media`` media
references, whichever comes first, so a batch of 12-megapixel images is not 2,000 of them while a text
batch is. A subset that makes fewer than ``min_batches`` batches (small for the cluster: the pipeline asks
for twice its CPUs) is split further, largest batch first, so every core has work to the end. The plan is
built in the catalog's one streaming pass; per-line facts are kept only while the subset is small enough to
need that split (at most ``min_batches * batch_lines`` lines), so memory stays bounded whatever the size.

The media count of a line is read from its bytes, not parsed: the larger of its ``<image>``/``<video>``
placeholders (a LLaVA record: one per image) and half its JSON strings ``"image"``/``"video"`` (a Nemotron
part ``{"type": "image", "image": ref}`` names one twice). An escaped quote (``\\"image\\"`` inside a
text) does not match; a literal ``<image>`` in a text does (the count only sizes batches).
"""

from __future__ import annotations

import heapq
from array import array
from dataclasses import dataclass

_QUOTED = (b'"image"', b'"video"')
_PLACEHOLDERS = (b"<image>", b"<video>")


def media_count(raw: bytes) -> int:
    """The media references of one JSONL line as the plan counts them (see the module docstring)."""
    quoted = sum(raw.count(m) for m in _QUOTED)
    return max(sum(raw.count(m) for m in _PLACEHOLDERS), (quoted + 1) // 2)


@dataclass(frozen=True)
class BatchPlan:
    """``offsets[i]`` is where batch ``i`` starts (the file size closes the last); ``first_lines[i]`` its
    first line (1-based); ``media[i]`` its media references as counted by :func:`media_count`."""

    offsets: tuple[int, ...]
    first_lines: tuple[int, ...]
    media: tuple[int, ...]


class BatchPlanner:
    """Fed every line of a JSONL in order (:meth:`add`), gives the plan at the end (:meth:`plan`)."""

    def __init__(self, batch_lines: int, batch_media: int | None, min_batches: int = 1) -> None:
        if batch_lines < 1 or (batch_media is not None and batch_media < 1) or min_batches < 1:
            raise ValueError("batch_lines, batch_media and min_batches must be positive")
        self.batch_lines, self.batch_media, self.min_batches = batch_lines, batch_media, min_batches
        self.offsets: list[int] = [0]
        self.first_lines: list[int] = [1]
        self.media: list[int] = [0]
        self._lines_in = 0  # lines of the open batch
        # per-line (offset, media) while a further split may be needed; dropped past that size
        self._line_offsets: array[int] | None = array("q")
        self._line_media: array[int] | None = array("q")

    def add(self, line: int, start: int, raw: bytes) -> None:
        media = media_count(raw) if self.batch_media is not None else 0
        over_lines = self._lines_in >= self.batch_lines
        over_media = self.batch_media is not None and self.media[-1] + media > self.batch_media
        if self._lines_in and (over_lines or over_media):
            self.offsets.append(start)
            self.first_lines.append(line)
            self.media.append(0)
            self._lines_in = 0
        self._lines_in += 1
        self.media[-1] += media
        if self._line_offsets is not None and self._line_media is not None:
            self._line_offsets.append(start)
            self._line_media.append(media)
            if len(self.offsets) >= self.min_batches:  # enough batches already: no split will be needed
                self._line_offsets = self._line_media = None

    def plan(self, size: int, rows: int) -> BatchPlan:
        """The plan of a file of ``size`` bytes and ``rows`` lines (every line was :meth:`add` -ed)."""
        if rows == 0:
            return BatchPlan((0,), (), ())
        small = self._line_offsets is not None and self._line_media is not None
        if small and len(self.offsets) < self.min_batches:
            starts = [line - 1 for line in self.first_lines]
            lines = (list(self._line_offsets or ()), list(self._line_media or ()))
            return _split(*lines, starts, size, self.min_batches)
        return BatchPlan((*self.offsets, size), tuple(self.first_lines), tuple(self.media))


def _split(offsets: list[int], media: list[int], starts: list[int], size: int, n: int) -> BatchPlan:
    """The batches starting at line indexes ``starts``, split into ``n`` (fewer only when there are fewer
    lines) by halving the batch with the most media (then the most lines) at its media midpoint (else its
    line midpoint), repeatedly: every new batch lies inside one of the old, so it keeps their limits."""
    rows = len(offsets)
    cuts = set(starts)
    heap = [
        (-media_sum(media, a, b), -(b - a), a, b)
        for a, b in zip(starts, [*starts[1:], rows], strict=True)
        if b - a > 1
    ]
    heapq.heapify(heap)
    while heap and len(cuts) < n:
        _, _, lo, hi = heapq.heappop(heap)
        mid = _midpoint(media, lo, hi)
        cuts.add(mid)
        for a, b in ((lo, mid), (mid, hi)):
            if b - a > 1:  # a one-line batch cannot be split
                heapq.heappush(heap, (-media_sum(media, a, b), -(b - a), a, b))
    starts = sorted(cuts)
    ends = [*starts[1:], rows]
    return BatchPlan(
        (*(offsets[i] for i in starts), size),
        tuple(i + 1 for i in starts),
        tuple(media_sum(media, a, b) for a, b in zip(starts, ends, strict=True)),
    )


def media_sum(media: list[int], lo: int, hi: int) -> int:
    return sum(media[lo:hi])


def _midpoint(media: list[int], lo: int, hi: int) -> int:
    """Where to cut lines ``[lo, hi)`` (at least two) in two: half the media on each side when the batch has
    media, else half the lines; never an empty side."""
    total = media_sum(media, lo, hi)
    if total > 0:
        acc = 0
        for i in range(lo, hi):
            acc += media[i]
            if 2 * acc >= total:
                return min(max(i + 1, lo + 1), hi - 1)
    return lo + (hi - lo) // 2
