"""What a run reports: its per-subset outcome (:class:`RunSummary`), the table printed at the end of
``vlmforge run`` and ``vlmforge refresh``, and the Markdown of the run's Prefect artifacts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import duckdb
from rich.console import Console
from rich.markup import escape

from ..tasks.batch import BatchStats
from ..tasks.gate import build_data_docs, load_run, quality_markdown
from ..tasks.manifests import OutputLayout
from ..tasks.ops import connect
from .narrow_tables import add_fixed, add_text, compact, narrow_table

console = Console()


@dataclass
class SubsetOutcome:
    subset: str
    license: str
    stats: BatchStats
    gate: str = "not run"
    published: bool = False
    shards: int = 0
    validation: str = "not run"
    error: str | None = None
    # nothing changed since its last publish: not gated, published or read back again (flows/pipeline.py)
    unchanged: bool = False
    # lines of the JSONL a trial run (--limit) left out: the subset's outcome is partial
    beyond_limit: int = 0


@dataclass
class RunSummary:
    run_id: str
    out: str
    subsets: list[SubsetOutcome] = field(default_factory=list)
    seconds: float = 0.0
    # what the run did, in order ("batches done S", "gate started S", ...: flows/schedule.py)
    events: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[str]:
        return [s.subset for s in self.subsets if not s.published]

    @property
    def unreadable(self) -> list[str]:
        """Published subsets that the trainer's loader did not read back as the manifests promise."""
        return [
            s.subset
            for s in self.subsets
            if s.published and s.validation not in ("ok", "not run", "unchanged")
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "out": self.out,
            "seconds": self.seconds,
            "subsets": [asdict(s) for s in self.subsets],
            "failed": self.failed,
            "unreadable": self.unreadable,
            "events": self.events,
        }


def print_summary(summary: RunSummary) -> None:
    """The per-subset table a run (or a refresh) ends with; readable at 80 columns (``narrow_tables``)."""
    t = narrow_table(f"vlmforge run {summary.run_id} ({summary.seconds:.1f} s wall) -> {summary.out}")
    add_text(t, "subset", min_width=8)
    add_text(t, "license", min_width=7)
    for col in ("rows", "ok", "rej", "drop", "img", "vid", "tokens"):
        add_fixed(t, col, right=True)
    add_text(t, "gate", min_width=8)
    for s in summary.subsets:
        st = s.stats
        gate = ("[green]" if s.published else "[red]") + escape((s.error or s.gate)[:200])
        counts = (st.lines, st.ok, st.rejected, st.dropped, st.images, st.videos)
        t.add_row(
            escape(s.subset),
            escape(s.license),
            *(compact(n) for n in counts),
            compact(st.text_tokens + st.visual_tokens),
            gate,
        )
    console.print(t)
    console.print(
        "rej: rejected, drop: dropped (limits), img/vid: images/videos; exact counts: the manifests"
    )
    unchanged = [s.subset for s in summary.subsets if s.unchanged]
    if unchanged:
        every = "every subset" if len(unchanged) == len(summary.subsets) else ", ".join(unchanged)
        console.print(
            f"unchanged since the last publish (same inputs, options and code): {every}; not gated or "
            "published again, the earlier verdicts and datasets stand",
            highlight=False,
        )
        read_now = [s.subset for s in summary.subsets if s.unchanged and s.validation != "unchanged"]
        if read_now:  # published by a run stopped before its read-back
            console.print(f"read back now (a stopped run had not): {', '.join(read_now)}", highlight=False)
    partial = [s for s in summary.subsets if s.beyond_limit]
    if partial:  # rows = ok + rej + drop + beyond the limit
        left = ", ".join(f"{s.subset} {s.beyond_limit:,}" for s in partial)
        console.print(
            f"partial (--limit): rows beyond the limit, not taken: {left}; a run without --limit "
            "completes them",
            highlight=False,
        )


def summary_markdown(summary: RunSummary) -> str:
    lines = [
        f"# vlmforge run {summary.run_id}",
        "",
        "| subset | license | rows | ok | rejected | dropped | images | videos | text tokens | visual tokens"
        " | gate | published | shards | validation | fetched | fetch failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|",
    ]
    for s in summary.subsets:
        st = s.stats
        gate = s.gate.replace("|", "/")[:300]
        lines.append(
            f"| {s.subset} | {s.license} | {st.lines} | {st.ok} | {st.rejected} | {st.dropped} | {st.images}"
            f" | {st.videos} | {st.text_tokens} | {st.visual_tokens} | {gate} | {s.published} | {s.shards}"
            f" | {s.validation} | {st.fetched} | {st.fetch_failed} |"
        )
    return "\n".join(lines) + "\n"


def publish_quality(layout: OutputLayout, run_id: str, logger: Any, served_url: str | None = None) -> str:
    """Data Docs of the run and their Markdown summary (for the artifact), linked over http when a
    ``vlmforge server --docs`` serves them (``served_url``), else by path with how to serve them; never
    fails the run."""
    try:
        docs = build_data_docs(layout, run_id)
        if served_url:
            return quality_markdown(load_run(layout, run_id), replace(docs, url=served_url))
        return (
            quality_markdown(load_run(layout, run_id), docs)
            + f"\nTo open them in a browser, {_serve(layout)}\n"
        )
    except Exception as exc:  # noqa: BLE001 - the gate decided already; the report is a convenience
        logger.warning("quality report not built: %s: %s", type(exc).__name__, exc)
        return f"# Quality gate of run {run_id}\n\nreport not built: {type(exc).__name__}: {exc}\n"


def _serve(layout: OutputLayout) -> str:
    from .docs_link import serve_hint

    return serve_hint(layout.out) if "://" not in layout.out else "copy them to a local disk"


def failures_markdown(summary: RunSummary) -> str:
    """Rejected and dropped samples and failed subsets, by class (the first word of each reason)."""
    lines = [f"# Failures of run {summary.run_id}", ""]
    for s in summary.subsets:
        if s.error or not s.published:
            lines.append(f"- **{s.subset}** not published: {(s.error or s.gate)[:300]}")
    try:
        con = connect(summary.out)
        rows = con.execute(
            "SELECT subset, status, split_part(reason, ':', 1) AS class, count(*) AS n FROM samples "
            "WHERE status <> 'ok' GROUP BY ALL ORDER BY subset, n DESC"
        ).fetchall()
    except (duckdb.Error, OSError, ImportError) as exc:
        lines.append(f"\n(no manifest query: {exc})")
        rows = []
    if rows:
        lines += ["", "| subset | status | class | samples |", "|---|---|---|---:|"]
        lines += [f"| {sub} | {st} | {cls} | {n} |" for sub, st, cls, n in rows]
    return "\n".join(lines) + "\n"
