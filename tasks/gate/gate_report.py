"""A run's gate results as people read them: table rows (``vlmforge quality``), a Markdown summary (the
Prefect artifact) and the HTML report page that opens the Data Docs.

Everything here is rendered from the recorded results (:class:`.results.RunQuality`), so the three views
always agree with each other and with ``OUT/quality/<run>/*.json``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field

from .results import RunQuality, SubsetQuality
from .suites import SUITES

REPORT_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5rem 2rem;
       color: #1d2330; line-height: 1.45; }
h1 { font-size: 1.4rem; margin-bottom: .25rem; }
.meta { color: #5b6275; margin: 0 0 1rem; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #d4d8e0; padding: .35rem .55rem; text-align: left; vertical-align: top; }
th { background: #f1f3f7; }
.passed { color: #1e7b34; font-weight: 600; }
.failed { color: #b3261e; font-weight: 600; }
.skipped, .notrun { color: #8a5a00; font-weight: 600; }
ul.failures { margin: 0; padding-left: 1.1rem; }
ul.failures li { margin: .15rem 0; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .85rem; }
.suites a { margin-right: .6rem; white-space: nowrap; }
details { margin-top: .3rem; font-size: .85rem; }
code { font-size: .85rem; }
"""


@dataclass
class QualityDocs:
    """The Data Docs of one run: the report's path and URL, and each GX page (relative to the docs)."""

    index: str
    url: str
    pages: dict[tuple[str, str], str] = field(default_factory=dict)  # (subset, suite) -> relative path


# --------------------------------------------------------------------------------------------------------
# Table rows and Markdown


def quality_rows(run: RunQuality) -> list[dict[str, str]]:
    """One row per subset: result, each suite's outcome, and the failures (for the CLI and artifacts)."""
    rows = []
    for sq in run.subsets.values():
        suites = sq.suites
        row = {"subset": sq.subset, "result": sq.status}
        for suite in SUITES:
            row[suite] = "-" if suite not in suites else "ok" if suites[suite] else "FAILED"
        row["failures"] = "\n".join(sq.failures)
        rows.append(row)
    return rows


def quality_markdown(run: RunQuality, docs: QualityDocs | None = None) -> str:
    """A Markdown summary for the Prefect run (artifact): outcome per subset and the failures."""
    lines = [f"# Quality gate of run {run.run_id}", ""]
    if docs is not None:
        lines += [f"Data Docs: [{docs.index}]({docs.url})", ""]
    if run.skip_gate:
        lines += ["**The gate was skipped (--skip-gate).**", ""]
    lines += [
        "| subset | result | " + " | ".join(SUITES) + " | what failed |",
        "|---|---|" + "---|" * len(SUITES) + "---|",
    ]
    for row in quality_rows(run):
        failures = "<br>".join(f.replace("|", "/")[:300] for f in row["failures"].splitlines())
        lines.append(
            f"| {row['subset']} | {row['result']} | "
            + " | ".join(row[s] for s in SUITES)
            + f" | {failures} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------
# The HTML report page (docs/index.html)


def report_html(run: RunQuality, pages: Mapping[tuple[str, str], str]) -> str:
    """The run's report page: one row per subset, its suites (linked to the GX pages) and its failures."""
    lines = _report_head(run)
    lines += [_subset_row(sq, pages) for sq in run.subsets.values()]
    lines += ["</tbody></table>", "</body></html>"]
    return "\n".join(lines) + "\n"


def _report_head(run: RunQuality) -> list[str]:
    """The page up to the table body: title, the run's outcome in one line, the table header."""
    esc = html.escape
    checked = [s for s in run.subsets.values() if s.passed is not None]
    passed = [s for s in checked if s.passed]
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>vlmforge quality: run {esc(run.run_id)}</title>",
        f"<style>{REPORT_CSS}</style></head><body>",
        f"<h1>Quality gate of run <code>{esc(run.run_id)}</code></h1>",
        f'<p class="meta">{len(passed)} of {len(checked)} checked subsets passed'
        + (f"; held back: <b>{esc(', '.join(run.failed))}</b>" if run.failed else "")
        + (" &middot; <b>gate skipped (--skip-gate)</b>" if run.skip_gate else "")
        + (f" &middot; overrides: {esc(', '.join(run.overrides))}" if run.overrides else "")
        + ' &middot; <a href="gx-index.html">Great Expectations site index</a></p>',
        "<table><thead><tr><th>subset</th><th>result</th><th>suites</th><th>what failed</th></tr></thead>",
        "<tbody>",
    ]


def _subset_row(sq: SubsetQuality, pages: Mapping[tuple[str, str], str]) -> str:
    """One subset's table row: status, suite links, parameters, failures."""
    esc = html.escape
    failures = "".join(f"<li>{esc(f)}</li>" for f in sq.failures)
    return (
        f"<tr><td><b>{esc(sq.subset)}</b></td><td>{_status_html(sq.status)}</td>"
        f'<td class="suites">{_suite_links(sq, pages)}{_params_details(sq)}</td>'
        f"<td>{'<ul class=failures>' + failures + '</ul>' if failures else ''}</td></tr>"
    )


def _status_html(status: str) -> str:
    cls = {"passed": "passed", "failed": "failed", "not run": "notrun"}.get(status, "skipped")
    return f'<span class="{cls}">{html.escape(status)}</span>'


def _suite_links(sq: SubsetQuality, pages: Mapping[tuple[str, str], str]) -> str:
    """Each suite's outcome mark and name, linked to its Great Expectations page when there is one."""
    esc = html.escape
    links = []
    for suite, ok in sq.suites.items():
        mark = "&#10004;" if ok else "&#10008;"
        cls = "passed" if ok else "failed"
        page = pages.get((sq.subset, suite))
        label = f'<span class="{cls}">{mark}</span> {esc(suite)}'
        links.append(f'<a href="{esc(page)}">{label}</a>' if page else label)
    return "".join(links)


def _params_details(sq: SubsetQuality) -> str:
    """The subset's effective parameters, folded away (empty when none were recorded)."""
    params = {k: v for r in sq.results for k, v in r.params.items()}
    if not params:
        return ""
    shown = ", ".join(f"{k}={'no limit' if v is None else v}" for k, v in sorted(params.items()))
    return "<details><summary>parameters</summary><code>" + html.escape(shown) + "</code></details>"
