"""Plots as inline SVG strings: a histogram, a bar chart of a small histogram, a log-log scatter.

Plain text, no script, no external font or CSS: the stats page embeds them and opens anywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["SCATTER_POINTS", "svg_bars", "svg_histogram", "svg_scatter"]

SCATTER_POINTS = 3000  # per subset, evenly spaced over the images (deterministic)
_W, _H = 440, 230
_M = {"l": 56, "r": 14, "t": 28, "b": 42}
_BAR = "#4c78a8"
_ACCENT = "#e45756"


def _fmt(v: float) -> str:
    if v >= 1e9:
        return f"{v / 1e9:.3g}G"
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    if v >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}" if v != int(v) else str(int(v))


def _frame(title: str, xlabel: str, ylabel: str) -> list[str]:
    x0, y0, x1, y1 = _M["l"], _M["t"], _W - _M["r"], _H - _M["b"]
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" '
        f'role="img" aria-label="{html.escape(title)}">',
        f'<text x="{_W / 2}" y="16" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{x0}" y1="{y1}" x2="{x1}" y2="{y1}" stroke="#999"/>',
        f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y1}" stroke="#999"/>',
        f'<text x="{(x0 + x1) / 2}" y="{_H - 6}" text-anchor="middle">{html.escape(xlabel)}</text>',
        f'<text x="12" y="{(y0 + y1) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(y0 + y1) / 2})">{html.escape(ylabel)}</text>',
    ]


def _empty(title: str) -> str:
    parts = _frame(title, "", "")
    parts.append(f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no data</text></svg>')
    return "".join(parts)


def svg_histogram(
    values: np.ndarray, title: str, xlabel: str, marks: Sequence[tuple[str, float]] = ()
) -> str:
    """Histogram (log-spaced bins when the values span more than 20x) with labelled vertical marks."""
    values = values[values > 0] if values.size else values
    if values.size == 0:
        return _empty(title)
    edges, log = _bin_edges(values)
    counts, _ = np.histogram(values, bins=edges)
    xpos = _x_scale(edges, log)
    top = max(int(counts.max()), 1)
    parts = _frame(title, xlabel + (" (log scale)" if log else ""), "samples")
    parts += _histogram_bars(counts, edges, xpos, top)
    parts += _histogram_ticks(edges, log, xpos, top)
    parts += _marks(marks, edges, xpos)
    parts.append("</svg>")
    return "".join(parts)


def _bin_edges(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """30 bins over the values (log-spaced when they span more than 20x), and whether they are log-spaced."""
    lo, hi = float(values.min()), float(values.max())
    log = hi / lo > 20
    if hi == lo:
        return np.array([lo - 0.5, hi + 0.5]), log
    if log:
        return np.geomspace(lo, hi * 1.0001, 31), log
    return np.linspace(lo, hi * 1.0001, 31), log


def _x_scale(edges: np.ndarray, log: bool) -> Callable[[float], float]:
    x0, x1 = _M["l"], _W - _M["r"]

    def xpos(v: float) -> float:
        if log:
            return x0 + (math.log(v) - math.log(edges[0])) / (math.log(edges[-1]) - math.log(edges[0])) * (
                x1 - x0
            )
        return x0 + (v - edges[0]) / (edges[-1] - edges[0]) * (x1 - x0)

    return xpos


def _histogram_bars(
    counts: np.ndarray, edges: np.ndarray, xpos: Callable[[float], float], top: int
) -> list[str]:
    y0, y1 = _M["t"], _H - _M["b"]
    parts = []
    for c, a, b in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        if c:
            h = c / top * (y1 - y0)
            parts.append(
                f'<rect x="{xpos(a):.1f}" y="{y1 - h:.1f}" width="{max(xpos(b) - xpos(a) - 1, 1):.1f}" '
                f'height="{h:.1f}" fill="{_BAR}"><title>{_fmt(a)}-{_fmt(b)}: {c}</title></rect>'
            )
    return parts


def _histogram_ticks(edges: np.ndarray, log: bool, xpos: Callable[[float], float], top: int) -> list[str]:
    """x labels at both ends and the middle; y labels at 0 and the top count."""
    x0, y0, y1 = _M["l"], _M["t"], _H - _M["b"]
    parts = []
    for frac in (0.0, 0.5, 1.0):
        v = (
            float(np.exp(np.log(edges[0]) + frac * np.log(edges[-1] / edges[0])))
            if log
            else (edges[0] + frac * (edges[-1] - edges[0]))
        )
        parts.append(f'<text x="{xpos(v):.1f}" y="{y1 + 14}" text-anchor="middle">{_fmt(v)}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">0</text>')
    return parts


def _marks(
    marks: Sequence[tuple[str, float]], edges: np.ndarray, xpos: Callable[[float], float]
) -> list[str]:
    """Dashed vertical lines with labels (p50, p95, ...) inside the plotted range."""
    y0, y1 = _M["t"], _H - _M["b"]
    parts = []
    for label, v in marks:
        if edges[0] <= v <= edges[-1]:
            x = xpos(v)
            parts.append(
                f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="{_ACCENT}" '
                'stroke-dasharray="4 3"/>'
            )
            parts.append(f'<text x="{x + 3:.1f}" y="{y0 + 10}" fill="{_ACCENT}">{html.escape(label)}</text>')
    return parts


def svg_bars(counts: dict[int, int], title: str, xlabel: str) -> str:
    """Bar chart of a small integer histogram (one bar per value present, in order)."""
    if not counts:
        return _empty(title)
    keys = sorted(counts)
    x0, y0, x1, y1 = _M["l"], _M["t"], _W - _M["r"], _H - _M["b"]
    top = max(counts.values())
    step = (x1 - x0) / len(keys)
    parts = _frame(title, xlabel, "samples")
    for i, k in enumerate(keys):
        h = counts[k] / top * (y1 - y0)
        x = x0 + i * step
        parts.append(
            f'<rect x="{x + step * 0.1:.1f}" y="{y1 - h:.1f}" width="{step * 0.8:.1f}" height="{h:.1f}" '
            f'fill="{_BAR}"><title>{k}: {counts[k]}</title></rect>'
        )
        if len(keys) <= 24 or i % max(1, len(keys) // 12) == 0:
            parts.append(f'<text x="{x + step / 2:.1f}" y="{y1 + 14}" text-anchor="middle">{k}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">0</text></svg>')
    return "".join(parts)


def svg_scatter(xs: np.ndarray, ys: np.ndarray, title: str, xlabel: str, ylabel: str) -> str:
    """Log-log scatter with the y = x diagonal (points on it were kept at their size)."""
    keep = (xs > 0) & (ys > 0)
    xs, ys = xs[keep].astype(np.float64), ys[keep].astype(np.float64)
    if xs.size == 0:
        return _empty(title)
    if xs.size > SCATTER_POINTS:
        pick = np.linspace(0, xs.size - 1, SCATTER_POINTS).round().astype(np.int64)
        xs, ys = xs[pick], ys[pick]
    lo = math.log10(min(xs.min(), ys.min())) - 0.1
    hi = math.log10(max(xs.max(), ys.max())) + 0.1
    x0, y0, x1, y1 = _M["l"], _M["t"], _W - _M["r"], _H - _M["b"]

    def px(v: float) -> float:
        return x0 + (math.log10(v) - lo) / (hi - lo) * (x1 - x0)

    def py(v: float) -> float:
        return y1 - (math.log10(v) - lo) / (hi - lo) * (y1 - y0)

    parts = _frame(title, xlabel + " (log)", ylabel + " (log)")
    a, b = 10**lo, 10**hi
    parts.append(
        f'<line x1="{px(a):.1f}" y1="{py(a):.1f}" x2="{px(b):.1f}" y2="{py(b):.1f}" stroke="#bbb" '
        'stroke-dasharray="3 3"/>'
    )
    for x, y in zip(xs.tolist(), ys.tolist(), strict=True):
        color = _ACCENT if y < x else _BAR
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{color}" fill-opacity="0.6"/>')
    for v in (10 ** math.ceil(lo), 10 ** math.floor(hi)):
        parts.append(f'<text x="{px(v):.1f}" y="{y1 + 14}" text-anchor="middle">{_fmt(v)}</text>')
        parts.append(f'<text x="{x0 - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    parts.append("</svg>")
    return "".join(parts)
