"""Per-subset statistics of a run, from its manifests (DuckDB), and a self-contained HTML report.

Numbers: per subset the input rows, ok / rejected / dropped samples, images and videos of the ok samples,
text / visual / total tokens (sum, p50, p95, max over ok samples; percentiles are nearest-rank, DuckDB
``quantile_disc``: the ceil(q * n)-th smallest value) and the images-per-sample histogram.

The report adds plots as inline SVG (token length distribution per subset, images per sample, image pixels
before / after the pipeline's resize): one HTML file, no script, no external CSS or fonts, nothing fetched,
so it opens anywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..manifests import OutputLayout
from ..storage import atomic_write_bytes

__all__ = ["Dist", "StatsReport", "SubsetStats", "compute_stats", "render_html", "write_stats_report"]

_SCATTER_POINTS = 3000  # per subset, evenly spaced over the images (deterministic)


@dataclass(frozen=True)
class Dist:
    """sum, p50, p95 and max of one token column over a subset's ok samples."""

    sum: int
    p50: int
    p95: int
    max: int


@dataclass
class SubsetStats:
    subset: str
    rows: int
    ok: int
    rejected: int
    dropped: int
    images: int
    videos: int
    text: Dist
    visual: Dist
    total: Dist
    images_per_sample: dict[int, int]  # n_images -> ok samples
    resized_images: int = 0  # ok images the pipeline resized (stored pixels < displayed pixels)
    # plot data (not printed)
    total_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    pixels_before: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    pixels_after: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)


@dataclass
class StatsReport:
    out: str
    subsets: list[SubsetStats]
    html_path: str | None = None
    stage_run: str | None = None  # the run whose per-stage times ``stages`` holds (the latest one)
    stages: list[dict[str, Any]] = field(default_factory=list)  # rows of the ``runs`` table

    def to_dict(self) -> dict[str, object]:
        return {
            "out": self.out,
            "html": self.html_path,
            "stage_run": self.stage_run,
            "stages": self.stages,
            "subsets": [
                {
                    "subset": s.subset,
                    "rows": s.rows,
                    "ok": s.ok,
                    "rejected": s.rejected,
                    "dropped": s.dropped,
                    "images": s.images,
                    "videos": s.videos,
                    "resized_images": s.resized_images,
                    **{
                        f"{name}_tokens": {"sum": d.sum, "p50": d.p50, "p95": d.p95, "max": d.max}
                        for name, d in (("text", s.text), ("visual", s.visual), ("total", s.total))
                    },
                    "images_per_sample": {str(k): v for k, v in sorted(s.images_per_sample.items())},
                }
                for s in self.subsets
            ],
        }


_AGG = """
SELECT subset,
       count(*) AS rows,
       count(*) FILTER (WHERE status = 'ok') AS ok,
       count(*) FILTER (WHERE status = 'rejected') AS rejected,
       count(*) FILTER (WHERE status = 'dropped') AS dropped,
       coalesce(sum(n_images) FILTER (WHERE status = 'ok'), 0) AS images,
       coalesce(sum(n_videos) FILTER (WHERE status = 'ok'), 0) AS videos,
       {cols}
FROM samples {where}
GROUP BY subset ORDER BY subset
"""


def _dist_cols(col: str) -> str:
    ok = "FILTER (WHERE status = 'ok')"
    return (
        f"coalesce(sum({col}) {ok}, 0) AS {col}_sum, "
        f"coalesce(quantile_disc({col}, 0.5) {ok}, 0) AS {col}_p50, "
        f"coalesce(quantile_disc({col}, 0.95) {ok}, 0) AS {col}_p95, "
        f"coalesce(max({col}) {ok}, 0) AS {col}_max"
    )


def compute_stats(out: str, subsets: Sequence[str] | None = None) -> StatsReport:
    """Statistics of every subset of ``out`` with a ``samples`` table (or the named ones)."""
    from .query import connect

    con = connect(out)
    try:
        where = "WHERE subset IN (SELECT unnest($subsets))" if subsets else ""
        cols = ", ".join(_dist_cols(c) for c in ("text_tokens", "visual_tokens", "total_tokens"))
        named = {"subsets": list(subsets)} if subsets else None
        agg = con.sql(_AGG.format(cols=cols, where=where), params=named)
        names = list(agg.columns)
        rows = agg.fetchall()
        hist = con.sql(
            f"SELECT subset, n_images, count(*) FROM samples WHERE status = 'ok' "
            f"{'AND subset IN (SELECT unnest($subsets))' if subsets else ''} GROUP BY ALL ORDER BY ALL",
            params=named,
        ).fetchall()
        tokens = con.sql(
            f"SELECT subset, total_tokens FROM samples WHERE status = 'ok' AND total_tokens IS NOT NULL "
            f"{'AND subset IN (SELECT unnest($subsets))' if subsets else ''} ORDER BY subset, line",
            params=named,
        ).to_arrow_table()
        pixels = con.sql(
            "SELECT subset, width::BIGINT * height AS before, out_width::BIGINT * out_height AS after "
            "FROM media WHERE kind = 'image' AND status = 'ok' AND width > 0 AND out_width > 0 "
            f"{'AND subset IN (SELECT unnest($subsets))' if subsets else ''} ORDER BY subset, line, index",
            params=named,
        ).to_arrow_table()
    finally:
        con.close()

    per_hist: dict[str, dict[int, int]] = {}
    for subset, n_images, count in hist:
        per_hist.setdefault(subset, {})[int(n_images)] = int(count)
    tok_subset = np.asarray(tokens.column("subset").to_pylist(), dtype=object)
    tok_values = tokens.column("total_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    px_subset = np.asarray(pixels.column("subset").to_pylist(), dtype=object)
    px_before = pixels.column("before").to_numpy(zero_copy_only=False).astype(np.int64)
    px_after = pixels.column("after").to_numpy(zero_copy_only=False).astype(np.int64)

    result: list[SubsetStats] = []
    for row in rows:
        r = dict(zip(names, row, strict=True))
        subset = str(r["subset"])

        def dist(col: str, r: dict[str, Any] = r) -> Dist:
            return Dist(*(int(r[f"{col}_{k}"] or 0) for k in ("sum", "p50", "p95", "max")))

        in_px = px_subset == subset
        before, after = px_before[in_px], px_after[in_px]
        result.append(
            SubsetStats(
                subset=subset,
                rows=int(r["rows"]),
                ok=int(r["ok"]),
                rejected=int(r["rejected"]),
                dropped=int(r["dropped"]),
                images=int(r["images"]),
                videos=int(r["videos"]),
                text=dist("text_tokens"),
                visual=dist("visual_tokens"),
                total=dist("total_tokens"),
                images_per_sample=per_hist.get(subset, {}),
                resized_images=int((after < before).sum()),
                total_tokens=tok_values[tok_subset == subset],
                pixels_before=before,
                pixels_after=after,
            )
        )
    if subsets:
        missing = sorted(set(subsets) - {s.subset for s in result})
        if missing:
            from ..errors import ConfigError

            raise ConfigError(f"no samples for subset(s) {', '.join(missing)} in {out}")
    return StatsReport(out=out, subsets=result)


# --------------------------------------------------------------------------------------------------------
# HTML + inline SVG
# --------------------------------------------------------------------------------------------------------

_W, _H = 440, 230
_M = {"l": 56, "r": 14, "t": 28, "b": 42}
_BAR = "#4c78a8"
_ACCENT = "#e45756"
_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:12px}.grid figure{margin:0;border:1px solid #eee;padding:4px}
figcaption{font-size:12px;color:#555;text-align:center}svg text{font-size:11px;fill:#333}
.note{color:#666;font-size:12px}
"""


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
    lo, hi = float(values.min()), float(values.max())
    log = hi / lo > 20
    if hi == lo:
        edges = np.array([lo - 0.5, hi + 0.5])
    elif log:
        edges = np.geomspace(lo, hi * 1.0001, 31)
    else:
        edges = np.linspace(lo, hi * 1.0001, 31)
    counts, _ = np.histogram(values, bins=edges)
    x0, y0, x1, y1 = _M["l"], _M["t"], _W - _M["r"], _H - _M["b"]

    def xpos(v: float) -> float:
        if log:
            return x0 + (math.log(v) - math.log(edges[0])) / (math.log(edges[-1]) - math.log(edges[0])) * (
                x1 - x0
            )
        return x0 + (v - edges[0]) / (edges[-1] - edges[0]) * (x1 - x0)

    top = max(int(counts.max()), 1)
    parts = _frame(title, xlabel + (" (log scale)" if log else ""), "samples")
    for c, a, b in zip(counts.tolist(), edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        if c:
            h = c / top * (y1 - y0)
            parts.append(
                f'<rect x="{xpos(a):.1f}" y="{y1 - h:.1f}" width="{max(xpos(b) - xpos(a) - 1, 1):.1f}" '
                f'height="{h:.1f}" fill="{_BAR}"><title>{_fmt(a)}-{_fmt(b)}: {c}</title></rect>'
            )
    for frac in (0.0, 0.5, 1.0):
        v = (
            float(np.exp(np.log(edges[0]) + frac * np.log(edges[-1] / edges[0])))
            if log
            else (edges[0] + frac * (edges[-1] - edges[0]))
        )
        parts.append(f'<text x="{xpos(v):.1f}" y="{y1 + 14}" text-anchor="middle">{_fmt(v)}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y0 + 4}" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{x0 - 4}" y="{y1}" text-anchor="end">0</text>')
    for label, v in marks:
        if edges[0] <= v <= edges[-1]:
            x = xpos(v)
            parts.append(
                f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y1}" stroke="{_ACCENT}" '
                'stroke-dasharray="4 3"/>'
            )
            parts.append(f'<text x="{x + 3:.1f}" y="{y0 + 10}" fill="{_ACCENT}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


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
    if xs.size > _SCATTER_POINTS:
        pick = np.linspace(0, xs.size - 1, _SCATTER_POINTS).round().astype(np.int64)
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


def render_html(report: StatsReport) -> str:
    """The self-contained HTML report of ``report``."""
    esc = html.escape
    rows = []
    for s in report.subsets:
        cells = [
            esc(s.subset),
            f"{s.rows:,}",
            f"{s.ok:,}",
            f"{s.rejected:,}",
            f"{s.dropped:,}",
            f"{s.images:,}",
            f"{s.videos:,}",
            f"{s.resized_images:,}",
        ]
        for d in (s.text, s.visual, s.total):
            cells += [f"{d.sum:,}", f"{d.p50:,}", f"{d.p95:,}", f"{d.max:,}"]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    groups = "".join(f'<th colspan="4">{g} tokens</th>' for g in ("text", "visual", "total"))
    sub = "".join("<th>sum</th><th>p50</th><th>p95</th><th>max</th>" for _ in range(3))
    head = (
        '<tr><th rowspan="2">subset</th><th rowspan="2">rows</th><th rowspan="2">ok</th>'
        '<th rowspan="2">rejected</th><th rowspan="2">dropped</th><th rowspan="2">images</th>'
        f'<th rowspan="2">videos</th><th rowspan="2">resized images</th>{groups}</tr><tr>{sub}</tr>'
    )
    hist_rows = []
    for s in report.subsets:
        for k in sorted(s.images_per_sample):
            hist_rows.append(
                f"<tr><td>{esc(s.subset)}</td><td>{k}</td><td>{s.images_per_sample[k]:,}</td></tr>"
            )

    def figs(render: object) -> str:
        assert callable(render)
        return (
            '<div class="grid">'
            + "".join(
                f"<figure>{render(s)}<figcaption>{esc(s.subset)}</figcaption></figure>"
                for s in report.subsets
            )
            + "</div>"
        )

    tokens_figs = figs(
        lambda s: svg_histogram(
            s.total_tokens,
            f"{s.subset}: total tokens",
            "tokens per sample",
            (("p50", s.total.p50), ("p95", s.total.p95)),
        )
    )
    images_figs = figs(lambda s: svg_bars(s.images_per_sample, f"{s.subset}: images per sample", "images"))
    pixel_figs = figs(
        lambda s: svg_scatter(
            s.pixels_before,
            s.pixels_after,
            f"{s.subset}: pixels per image",
            "before (as displayed)",
            "after (stored)",
        )
    )
    total_ok = sum(s.ok for s in report.subsets)
    total_tokens = sum(s.total.sum for s in report.subsets)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>vlmforge stats: {esc(report.out)}</title><style>{_CSS}</style></head><body>"
        f"<h1>vlmforge stats: {esc(report.out)}</h1>"
        f"<p>{len(report.subsets)} subset(s), {total_ok:,} ok samples, {total_tokens:,} tokens. "
        "Token columns are over ok samples; p50 / p95 are nearest-rank percentiles.</p>"
        f"<h2>Per subset</h2><table>{head}{''.join(rows)}</table>"
        f"<h2>Token length distribution</h2>{tokens_figs}"
        '<h2>Images per sample</h2><div class="grid"><table><tr><th>subset</th><th>images</th>'
        f"<th>samples</th></tr>{''.join(hist_rows)}</table></div>{images_figs}"
        '<h2>Image pixels before / after resize</h2><p class="note">One point per image (at most '
        f"{_SCATTER_POINTS:,} per subset, evenly spaced); red points were resized by the pipeline, points "
        "on the dashed diagonal were kept at their size.</p>"
        f"{pixel_figs}{_stages_html(report)}</body></html>\n"
    )


def _stages_html(report: StatsReport) -> str:
    if not report.stages:
        return ""
    esc = html.escape
    cols = ("subset", "stage", "seconds", "items", "unit", "items_per_s", "mb_per_s", "batches", "skipped")
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{esc('' if r.get(c) is None else str(r.get(c)))}</td>" for c in cols) + "</tr>"
        for r in report.stages
    )
    return (
        f'<h2>Stage times of run {esc(report.stage_run or "")}</h2><p class="note">Wall time per stage '
        "(subset _run: the whole run; per subset: summed over its batches).</p>"
        f"<table><tr>{head}</tr>{body}</table>"
    )


def write_stats_report(
    out: str, html_path: str | None = None, subsets: Sequence[str] | None = None
) -> StatsReport:
    """Compute the statistics and write the HTML report (default ``OUT/reports/stats.html``, atomically)."""
    report = compute_stats(out, subsets)
    report.stage_run, stages = read_stage_times(out)
    report.stages = [r for r in stages if not subsets or r["subset"] in (RUN_WIDE, *subsets)]
    layout = OutputLayout(out)
    if html_path is None:
        target_fs, target = layout.fs, f"{layout.root}/reports/stats.html"
        shown = f"{layout.out}/reports/stats.html"
    else:
        from ..storage import url_to_fs

        target_fs, target = url_to_fs(html_path)
        shown = html_path
    atomic_write_bytes(target_fs, target, render_html(report).encode("utf-8"))
    report.html_path = shown
    return report


# --------------------------------------------------------------------------------------------------------
# Per-stage wall time and throughput of runs (the ``runs`` manifest table)
# --------------------------------------------------------------------------------------------------------

RUN_WIDE = "_run"  # the subset value of run-wide stages


@dataclass(frozen=True)
class StageTime:
    """One row of the ``runs`` table."""

    subset: str
    stage: str
    seconds: float
    items: int | None = None
    unit: str | None = None
    bytes: int | None = None
    batches: int | None = None
    skipped: int | None = None

    def row(self, run_id: str, started_at: str | None, source_format: str | None) -> dict[str, object]:
        secs = max(self.seconds, 0.0)
        return {
            "subset": self.subset,
            "run_id": run_id,
            "stage": self.stage,
            "started_at": started_at,
            "seconds": round(secs, 6),
            "items": self.items,
            "unit": self.unit,
            "bytes": self.bytes,
            "items_per_s": round(self.items / secs, 3) if self.items is not None and secs > 0 else None,
            "mb_per_s": round(self.bytes / secs / 1e6, 3) if self.bytes is not None and secs > 0 else None,
            "batches": self.batches,
            "skipped": self.skipped,
            "source_format": source_format,
        }


def write_stage_times(
    out: str,
    run_id: str,
    times: Sequence[StageTime],
    *,
    started_at: str | None = None,
    source_format: str | None = None,
) -> list[str]:
    """Write one ``runs`` part per subset for run ``run_id``
    (``manifests/runs/subset=<s>/part-<run>.parquet``, atomically); returns the paths."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ...schemas.manifests import RUNS

    layout = OutputLayout(out)
    by_subset: dict[str, list[dict[str, object]]] = {}
    for t in times:
        by_subset.setdefault(t.subset, []).append(t.row(run_id, started_at, source_format))
    paths = []
    for subset, rows in sorted(by_subset.items()):
        table = pa.Table.from_pylist(rows, schema=RUNS)
        buf = io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        path = f"{layout.table_dir('runs', subset)}/part-{run_id}.parquet"
        atomic_write_bytes(layout.fs, path, buf.getvalue())
        paths.append(path)
    return paths


def batch_stage_times(subset: str, stats: Any) -> list[StageTime]:
    """Per-subset sub-stage rows from a subset's merged :class:`~vlmforge.tasks.batch.build.BatchStats`."""
    run = stats.batches - stats.skipped_batches
    return [
        StageTime(subset, "setup", stats.setup_seconds, None, None, None, run),
        StageTime(subset, "parse", stats.parse_seconds, stats.lines if run else 0, "rows", None, run),
        StageTime(subset, "media", stats.media_seconds, stats.media_refs, "media", stats.media_bytes, run),
        StageTime(subset, "tokens", stats.tokens_seconds, stats.ok if run else 0, "samples", None, run),
        StageTime(subset, "write", stats.write_seconds, stats.lines if run else 0, "rows", None, run),
        StageTime(
            subset,
            "batches",
            stats.setup_seconds
            + stats.parse_seconds
            + stats.media_seconds
            + stats.tokens_seconds
            + stats.write_seconds,
            stats.lines,
            "rows",
            None,
            stats.batches,
            stats.skipped_batches,
        ),
    ]


def read_stage_times(out: str, run_id: str | None = None) -> tuple[str | None, list[dict[str, Any]]]:
    """(run id, rows of the ``runs`` table for it): the latest run when ``run_id`` is None."""
    from .query import connect

    con = connect(out)
    try:
        if run_id is None:
            latest = con.execute("SELECT max(run_id) FROM runs").fetchone()
            run_id = latest[0] if latest else None
        if run_id is None:
            return None, []
        table = con.execute(
            "SELECT * FROM runs WHERE run_id = $run ORDER BY subset = '_run' DESC, subset, "
            "list_position(['staging','catalog','batches','setup','parse','media','tokens','write','gate','publish',"
            "'validate','run'], stage), stage",
            {"run": run_id},
        ).to_arrow_table()
        rows: list[dict[str, Any]] = table.to_pylist() if table is not None else []
    finally:
        con.close()
    return run_id, rows
