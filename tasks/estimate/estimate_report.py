"""The estimate as people read it: a terminal table that fits 80 columns, the same figures as JSON, and a
Markdown page (the Prefect artifact); after a run, the estimate beside what the run took."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from rich import box
from rich.table import Table

from ...schemas.estimate_rows import TOTAL, EstimateRow
from .versus import Versus

_UNITS = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def human_bytes(n: float) -> str:
    """Bytes in at most 5 characters (``0``, ``812``, ``3.4k``, ``96M``, ``9.2T``): tables fit 80 columns."""
    for size, unit in _UNITS:
        if abs(n) >= size:
            v = n / size
            return f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n:.0f}"


def human_hours(h: float) -> str:
    """Hours in at most 5 characters: ``45s``, ``2m24s``, ``38m``, ``2.5h``."""
    if h < 1 / 60:
        return f"{h * 3600:.0f}s"
    if h < 10 / 60:
        m, sec = divmod(round(h * 3600), 60)
        return f"{m}m{sec:02d}s"
    if h < 1:
        return f"{h * 60:.0f}m"
    return f"{h:.1f}h" if h < 100 else f"{h:.0f}h"


def _bytes_cell(r: EstimateRow) -> str:
    if r.bytes_method == "exact":
        return human_bytes(r.bytes)
    if r.bytes_method == "bound":
        return f"<={human_bytes(r.bytes_high)}"
    pct = (r.bytes_high - r.bytes) / r.bytes * 100 if r.bytes else 0
    return f"{human_bytes(r.bytes)}±{pct:.0f}%"  # the sample's 95% interval


def estimate_table(rows: list[EstimateRow], title: str) -> Table:
    """Subsets then the total; 9 narrow columns (80 columns): objects after de-duplication, those in the
    store, bytes (± the sample's 95% interval), transfer still to do, store and shard disk, hours and the
    bottleneck."""
    t = _narrow_table(title)
    for col in ("subset", "refs", "objects", "stored", "bytes", "fetch", "store", "shards", "hours"):
        t.add_column(col, justify="left" if col == "subset" else "right", overflow="fold", max_width=24)
    for r in rows:
        name = "total" if r.subset == TOTAL else r.subset
        t.add_row(
            f"[bold]{name}[/bold]" if r.subset == TOTAL else name,
            f"{r.refs:,}",
            f"{r.objects:,}",
            f"{r.in_store:,}",
            _bytes_cell(r),
            human_bytes(r.fetch_bytes),
            human_bytes(r.store_bytes),
            human_bytes(r.shard_bytes),
            f"{human_hours(r.hours)} {r.bottleneck}",
        )
    return t


def _narrow_table(title: str) -> Table:
    """The estimate's tables' style: left title, one header rule, no edge padding (fits 80 columns)."""
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )


def footnotes(rows: list[EstimateRow]) -> list[str]:
    """What the figures rest on: sizes measured, disk ratios, rates, misses, bodies read."""
    total = next((r for r in rows if r.subset == TOTAL), None)
    if total is None:
        return []
    settings = json.loads(total.settings or "{}")
    notes = [
        f"objects: {total.sources or 'none'}; {total.missing:,} references no source answers"
        + (f" ({total.missing_why})" if total.missing and total.missing_why else ""),
        f"sizes: {total.bytes_method}; {total.probed:,} objects sized by a request (HEAD, range, listing)",
        f"disk ratios: {total.disk_method}; {total.sample_bodies} media bodies read to measure them",
        f"hours at {settings.get('cores')} cores and "
        f"{human_bytes(settings.get('bandwidth_bytes_per_s', 0))}/s (rates: {total.rates}): start-up, "
        f"warm-up and end {human_hours(total.fixed_hours)} + the longest of cpu "
        f"{human_hours(total.cpu_hours)} (batches and each subset's gate, publish, read-back), network "
        f"{human_hours(total.network_hours)}, disk {human_hours(total.disk_hours)}",
    ]
    return notes


def versus_table(versus: list[Versus]) -> Table:
    """The estimate made before the latest run beside what the runs took (objects, bytes, disk)."""
    first = versus[0].estimate["estimate_id"] if versus else "?"
    t = _narrow_table(f"estimate {first} vs actual")
    for col in ("subset", "objects", "actual", "bytes", "actual", "err", "disk", "actual", "err"):
        t.add_column(col, justify="left" if col == "subset" else "right", max_width=24, overflow="fold")
    for v in versus:
        d = v.as_dict()
        t.add_row(
            "total" if v.subset == TOTAL else v.subset,
            f"{d['objects']:,}",
            f"{d['actual_objects']:,}",
            human_bytes(d["bytes"]),
            human_bytes(d["actual_bytes"]),
            _pct(d["bytes_error"]),
            human_bytes(d["disk"]),
            human_bytes(d["actual_disk"]),
            _pct(d["disk_error"]),
        )
    return t


def versus_hours(versus: list[Versus]) -> str | None:
    """The release's hours: estimated, and what the run took (its process, start-up included)."""
    total = next((v.as_dict() for v in versus if v.subset == TOTAL), None)
    if total is None or total.get("actual_hours") is None:
        return None
    return (
        f"hours: estimated {human_hours(total['hours'])}, the run took {human_hours(total['actual_hours'])} "
        f"({_pct(total['hours_error'])})"
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def as_json(rows: list[EstimateRow], versus: list[Versus]) -> dict[str, Any]:
    items = [asdict(r) for r in rows]
    for item in items:
        item["settings"] = json.loads(item["settings"] or "{}")
    return {
        "estimate_id": rows[0].estimate_id if rows else None,
        "subsets": [i for i in items if i["subset"] != TOTAL],
        "total": next((i for i in items if i["subset"] == TOTAL), None),
        "versus_actual": [v.as_dict() for v in versus],
    }


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def as_markdown(rows: list[EstimateRow], versus: list[Versus]) -> str:
    """The estimate as a Markdown page (the Prefect artifact of the estimate flow)."""
    cols = ["subset", "refs", "objects", "in store", "bytes", "fetch", "store", "shards", "hours"]
    lines = ["# Fetch estimate", "", _md_row(cols), _md_row(["---"] + ["---:"] * (len(cols) - 1))]
    for r in rows:
        name = "**total**" if r.subset == TOTAL else r.subset
        lines.append(
            _md_row(
                [name, f"{r.refs:,}", f"{r.objects:,}", f"{r.in_store:,}", _bytes_cell(r)]
                + [human_bytes(r.fetch_bytes), human_bytes(r.store_bytes), human_bytes(r.shard_bytes)]
                + [f"{human_hours(r.hours)} ({r.bottleneck})"]
            )
        )
    lines += ["", *(f"- {n}" for n in footnotes(rows))]
    if versus:
        hours = versus_hours(versus)
        cols = ["subset", "objects", "actual", "bytes", "actual", "disk", "actual"]
        lines += ["", "## Estimate vs actual", "", _md_row(cols), _md_row(["---"] + ["---:"] * 6)]
        for v in versus:
            d = v.as_dict()
            lines.append(
                _md_row(
                    [v.subset, f"{d['objects']:,}", f"{d['actual_objects']:,}"]
                    + [human_bytes(d[k]) for k in ("bytes", "actual_bytes", "disk", "actual_disk")]
                )
            )
        lines += ["", hours] if hours else []
    return "\n".join(lines) + "\n"
