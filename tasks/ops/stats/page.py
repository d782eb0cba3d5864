"""The stats report as one self-contained HTML page (``vlmforge stats``; default ``OUT/reports/stats.html``).

Tables of the numbers of :mod:`.compute`, inline SVG plots (:mod:`.svg`: token length distribution per
subset, images per sample, image pixels before / after the pipeline's resize) and the latest run's stage
times: one HTML file, no script, no external CSS or fonts, nothing fetched, so it opens anywhere.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

from ...manifests import OutputLayout
from ...storage import atomic_write_bytes, url_to_fs
from .compute import StatsReport, SubsetStats, compute_stats
from .stage_times import RUN_WIDE, read_stage_times
from .svg import SCATTER_POINTS, svg_bars, svg_histogram, svg_scatter

__all__ = ["render_html", "write_stats_report"]

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ddd;padding:4px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.grid{display:flex;flex-wrap:wrap;gap:12px}.grid figure{margin:0;border:1px solid #eee;padding:4px}
figcaption{font-size:12px;color:#555;text-align:center}svg text{font-size:11px;fill:#333}
.note{color:#666;font-size:12px}
"""
_STAGE_COLUMNS = (
    "subset",
    "stage",
    "seconds",
    "items",
    "unit",
    "items_per_s",
    "mb_per_s",
    "batches",
    "skipped",
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
        target_fs, target = url_to_fs(html_path)
        shown = html_path
    atomic_write_bytes(target_fs, target, render_html(report).encode("utf-8"))
    report.html_path = shown
    return report


def render_html(report: StatsReport) -> str:
    """The self-contained HTML report of ``report``."""
    esc = html.escape
    total_ok = sum(s.ok for s in report.subsets)
    total_tokens = sum(s.total.sum for s in report.subsets)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>vlmforge stats: {esc(report.out)}</title><style>{_CSS}</style></head><body>"
        f"<h1>vlmforge stats: {esc(report.out)}</h1>"
        f"<p>{len(report.subsets)} subset(s), {total_ok:,} ok samples, {total_tokens:,} tokens. "
        "Token columns are over ok samples; p50 / p95 are nearest-rank percentiles.</p>"
        f"<h2>Per subset</h2>{_subset_table(report)}"
        f"<h2>Token length distribution</h2>{_figures(report, _tokens_plot)}"
        '<h2>Images per sample</h2><div class="grid"><table><tr><th>subset</th><th>images</th>'
        f"<th>samples</th></tr>{_images_rows(report)}</table></div>{_figures(report, _images_plot)}"
        '<h2>Image pixels before / after resize</h2><p class="note">One point per image (at most '
        f"{SCATTER_POINTS:,} per subset, evenly spaced); red points were resized by the pipeline, points "
        "on the dashed diagonal were kept at their size.</p>"
        f"{_figures(report, _pixels_plot)}{_stages_html(report)}</body></html>\n"
    )


def _subset_table(report: StatsReport) -> str:
    groups = "".join(f'<th colspan="4">{g} tokens</th>' for g in ("text", "visual", "total"))
    sub = "".join("<th>sum</th><th>p50</th><th>p95</th><th>max</th>" for _ in range(3))
    head = (
        '<tr><th rowspan="2">subset</th><th rowspan="2">rows</th><th rowspan="2">ok</th>'
        '<th rowspan="2">rejected</th><th rowspan="2">dropped</th><th rowspan="2">images</th>'
        f'<th rowspan="2">videos</th><th rowspan="2">resized images</th>{groups}</tr><tr>{sub}</tr>'
    )
    return f"<table>{head}{''.join(_subset_row(s) for s in report.subsets)}</table>"


def _subset_row(s: SubsetStats) -> str:
    cells = [
        html.escape(s.subset),
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
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _images_rows(report: StatsReport) -> str:
    return "".join(
        f"<tr><td>{html.escape(s.subset)}</td><td>{k}</td><td>{s.images_per_sample[k]:,}</td></tr>"
        for s in report.subsets
        for k in sorted(s.images_per_sample)
    )


def _figures(report: StatsReport, render: Callable[[SubsetStats], str]) -> str:
    """One plot per subset, captioned, in a wrapping grid."""
    return (
        '<div class="grid">'
        + "".join(
            f"<figure>{render(s)}<figcaption>{html.escape(s.subset)}</figcaption></figure>"
            for s in report.subsets
        )
        + "</div>"
    )


def _tokens_plot(s: SubsetStats) -> str:
    marks = (("p50", s.total.p50), ("p95", s.total.p95))
    return svg_histogram(s.total_tokens, f"{s.subset}: total tokens", "tokens per sample", marks)


def _images_plot(s: SubsetStats) -> str:
    return svg_bars(s.images_per_sample, f"{s.subset}: images per sample", "images")


def _pixels_plot(s: SubsetStats) -> str:
    return svg_scatter(
        s.pixels_before,
        s.pixels_after,
        f"{s.subset}: pixels per image",
        "before (as displayed)",
        "after (stored)",
    )


def _stages_html(report: StatsReport) -> str:
    if not report.stages:
        return ""
    esc = html.escape
    head = "".join(f"<th>{c.replace('_', ' ')}</th>" for c in _STAGE_COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{esc('' if r.get(c) is None else str(r.get(c)))}</td>" for c in _STAGE_COLUMNS)
        + "</tr>"
        for r in report.stages
    )
    return (
        f'<h2>Stage times of run {esc(report.stage_run or "")}</h2><p class="note">Wall time per stage '
        "(subset _run: the whole run; per subset: summed over its batches).</p>"
        f"<table><tr>{head}</tr>{body}</table>"
    )
