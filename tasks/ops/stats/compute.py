"""Per-subset statistics of a run, from its manifests (DuckDB).

Numbers: per subset the input rows, ok / rejected / dropped samples, images and videos of the ok samples,
text / visual / total tokens (sum, p50, p95, max over ok samples; percentiles are nearest-rank, DuckDB
``quantile_disc``: the ceil(q * n)-th smallest value) and the images-per-sample histogram; plus the data
the report plots (token lengths, image pixels before / after the pipeline's resize).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import ConfigError
from ..query import connect

__all__ = ["Dist", "StatsReport", "SubsetStats", "compute_stats"]


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
            "subsets": [_subset_dict(s) for s in self.subsets],
        }


def _subset_dict(s: SubsetStats) -> dict[str, object]:
    return {
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


@dataclass
class _Tables:
    """What the queries return: aggregate rows (as dicts), the images histogram, token and pixel columns."""

    aggregates: list[dict[str, Any]]
    hist: list[tuple[Any, ...]]
    tokens: pa.Table
    pixels: pa.Table


def compute_stats(out: str, subsets: Sequence[str] | None = None) -> StatsReport:
    """Statistics of every subset of ``out`` with a ``samples`` table (or the named ones)."""
    tables = _query(out, subsets)
    result = _subset_stats(tables)
    if subsets:
        missing = sorted(set(subsets) - {s.subset for s in result})
        if missing:
            raise ConfigError(f"no samples for subset(s) {', '.join(missing)} in {out}")
    return StatsReport(out=out, subsets=result)


def _query(out: str, subsets: Sequence[str] | None) -> _Tables:
    con = connect(out)
    try:
        where = "WHERE subset IN (SELECT unnest($subsets))" if subsets else ""
        also = "AND subset IN (SELECT unnest($subsets))" if subsets else ""
        cols = ", ".join(_dist_cols(c) for c in ("text_tokens", "visual_tokens", "total_tokens"))
        named = {"subsets": list(subsets)} if subsets else None
        agg = con.sql(_AGG.format(cols=cols, where=where), params=named)
        names = list(agg.columns)
        aggregates = [dict(zip(names, row, strict=True)) for row in agg.fetchall()]
        hist = con.sql(
            f"SELECT subset, n_images, count(*) FROM samples WHERE status = 'ok' "
            f"{also} GROUP BY ALL ORDER BY ALL",
            params=named,
        ).fetchall()
        tokens = con.sql(
            f"SELECT subset, total_tokens FROM samples WHERE status = 'ok' AND total_tokens IS NOT NULL "
            f"{also} ORDER BY subset, line",
            params=named,
        ).to_arrow_table()
        pixels = con.sql(
            "SELECT subset, width::BIGINT * height AS before, out_width::BIGINT * out_height AS after "
            "FROM media WHERE kind = 'image' AND status = 'ok' AND width > 0 AND out_width > 0 "
            f"{also} ORDER BY subset, line, index",
            params=named,
        ).to_arrow_table()
    finally:
        con.close()
    return _Tables(aggregates, hist, tokens, pixels)


def _int64(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy(zero_copy_only=False).astype(np.int64)


def _subset_stats(tables: _Tables) -> list[SubsetStats]:
    per_hist: dict[str, dict[int, int]] = {}
    for subset, n_images, count in tables.hist:
        per_hist.setdefault(subset, {})[int(n_images)] = int(count)
    tok_subset = np.asarray(tables.tokens.column("subset").to_pylist(), dtype=object)
    tok_values = _int64(tables.tokens, "total_tokens")
    px_subset = np.asarray(tables.pixels.column("subset").to_pylist(), dtype=object)
    px_before, px_after = _int64(tables.pixels, "before"), _int64(tables.pixels, "after")
    result: list[SubsetStats] = []
    for r in tables.aggregates:
        subset = str(r["subset"])
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
                text=_dist(r, "text_tokens"),
                visual=_dist(r, "visual_tokens"),
                total=_dist(r, "total_tokens"),
                images_per_sample=per_hist.get(subset, {}),
                resized_images=int((after < before).sum()),
                total_tokens=tok_values[tok_subset == subset],
                pixels_before=before,
                pixels_after=after,
            )
        )
    return result


def _dist(r: dict[str, Any], col: str) -> Dist:
    return Dist(*(int(r[f"{col}_{k}"] or 0) for k in ("sum", "p50", "p95", "max")))
