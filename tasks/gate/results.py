"""Quality results of each run: recorded gate results, Great Expectations Data Docs, the results index,
drift baselines (a subset's last published run) and the rows of ``vlmforge quality OUT``.

Layout under ``OUT/quality/``::

    index.json                      results index: one entry per run (time, subsets passed / failed, docs)
    <run>/run.json                  the run's gate settings: skip_gate, override files, subsets
    <run>/<subset>.json             gate stage (samples, media, drift): GateResult as JSON, GX results inside
    <run>/<subset>.shards.json      shards stage, on the staged Energon dataset
    <run>/docs/index.html           the run's report: JS-free, opens offline; links every GX page
    <run>/docs/gx-index.html        Great Expectations' own site index (needs its CDN scripts)
    <run>/docs/validations/...      Great Expectations' validation pages (remote CSS/JS removed)
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OutputError
from ..manifests import OutputLayout
from ..storage import atomic_write_bytes, is_local
from .check import SUITES, Baseline, GateOverrides, GateResult, load_suite

SITE = "vlmforge"
RUN_FILE = "run.json"
INDEX_FILE = "index.json"
DOCS = "docs"
_RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6})")


def run_folder(layout: OutputLayout, run_id: str) -> str:
    return f"{layout.quality}/{run_id}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _write_json(layout: OutputLayout, path: str, data: Any) -> str:
    atomic_write_bytes(layout.fs, path, json.dumps(data, indent=1, default=str, sort_keys=False).encode())
    return path


def _read_json(layout: OutputLayout, path: str) -> Any:
    with layout.fs.open(path, "rb") as f:
        return json.loads(f.read())


def record_gate(layout: OutputLayout, run_id: str, result: GateResult) -> str:
    """Write ``result`` to ``OUT/quality/<run_id>/<subset>.json`` (``<subset>.shards.json`` for shards)."""
    suffix = ".json" if result.stage == "gate" else f".{result.stage}.json"
    path = f"{run_folder(layout, run_id)}/{result.subset}{suffix}"
    return _write_json(layout, path, result.to_json() | {"run_id": run_id, "recorded": _now()})


def record_run(
    layout: OutputLayout,
    run_id: str,
    *,
    subsets: Sequence[str],
    skip_gate: bool,
    overrides: GateOverrides | None = None,
) -> str:
    """Write the run's gate settings (``--skip-gate``, override files, selected subsets) to ``run.json``."""
    data = {
        "run_id": run_id,
        "recorded": _now(),
        "skip_gate": skip_gate,
        "overrides": list(overrides.files) if overrides else [],
        "override_entries": [[k, dict(v)] for k, v in overrides.entries] if overrides else [],
        "subsets": list(subsets),
    }
    return _write_json(layout, f"{run_folder(layout, run_id)}/{RUN_FILE}", data)


# --------------------------------------------------------------------------------------------------------
# Reading results


@dataclass
class SubsetQuality:
    """Everything recorded for one subset in one run (gate and shards stages)."""

    subset: str
    results: list[GateResult] = field(default_factory=list)
    skipped: bool = False

    @property
    def passed(self) -> bool | None:
        """True or False once checked; None when the gate was skipped or never ran for the subset."""
        if not self.results:
            return None
        return all(r.passed for r in self.results)

    @property
    def suites(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for r in self.results:
            out.update(r.suites)
        return out

    @property
    def failures(self) -> list[str]:
        return [f for r in self.results for f in r.failures]

    @property
    def status(self) -> str:
        if self.skipped and not self.results:
            return "skipped (--skip-gate)"
        passed = self.passed
        return "not run" if passed is None else "passed" if passed else "failed"


@dataclass
class RunQuality:
    run_id: str
    subsets: dict[str, SubsetQuality]
    skip_gate: bool = False
    overrides: list[str] = field(default_factory=list)
    recorded: str | None = None
    docs: str | None = None  # path of docs/index.html when built

    @property
    def failed(self) -> list[str]:
        return [name for name, s in self.subsets.items() if s.passed is False]


def _run_time(layout: OutputLayout, folder: str) -> float:
    try:
        return max(float(layout.fs.modified(p).timestamp()) for p in layout.fs.ls(folder, detail=False))
    except (ValueError, OSError, NotImplementedError):
        return 0.0


def list_runs(layout: OutputLayout) -> list[str]:
    """Run ids with quality results, oldest first (by the time their results were written)."""
    if not layout.fs.isdir(layout.quality):
        return []
    runs = []
    for p in layout.fs.ls(layout.quality, detail=False):
        name = p.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(".") or not layout.fs.isdir(p):
            continue
        runs.append((_run_time(layout, p), name))
    return [name for _t, name in sorted(runs)]


def load_run(layout: OutputLayout, run_id: str | None = None) -> RunQuality:
    """The recorded results of ``run_id`` (default: the latest run). OutputError when there are none."""
    runs = list_runs(layout)
    if not runs:
        raise OutputError(
            f"{layout.out!r} has no quality results (OUT/quality/ is empty): run `vlmforge run RELEASE "
            f"--out {layout.out}` first"
        )
    if run_id is None:
        run_id = runs[-1]
    elif run_id not in runs:
        raise OutputError(f"no quality results for run {run_id!r}; runs: {', '.join(runs[-10:])}")
    folder = run_folder(layout, run_id)
    run = RunQuality(run_id=run_id, subsets={})
    meta: dict[str, Any] = {}
    if layout.fs.isfile(f"{folder}/{RUN_FILE}"):
        meta = _read_json(layout, f"{folder}/{RUN_FILE}")
        run.skip_gate = bool(meta.get("skip_gate"))
        run.overrides = list(meta.get("overrides") or [])
        run.recorded = meta.get("recorded")
        for name in meta.get("subsets") or []:
            run.subsets[name] = SubsetQuality(name, skipped=run.skip_gate)
    for p in sorted(layout.fs.ls(folder, detail=False)):
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(".json") or name == RUN_FILE or name.startswith("."):
            continue
        try:
            result = GateResult.from_json(_read_json(layout, p))
        except (ValueError, TypeError, OSError):
            continue
        run.subsets.setdefault(result.subset, SubsetQuality(result.subset, skipped=run.skip_gate))
        run.subsets[result.subset].results.append(result)
    for sq in run.subsets.values():
        sq.results.sort(key=lambda r: r.stage != "gate")
    docs = f"{folder}/{DOCS}/index.html"
    run.docs = docs if layout.fs.isfile(docs) else None
    run.subsets = dict(sorted(run.subsets.items()))
    return run


def last_published(layout: OutputLayout, subset: str, *, exclude_run: str | None = None) -> Baseline | None:
    """``subset``'s counts in the latest run (``OUT/runs/<run>.json``) that published it, or None."""
    folder = f"{layout.root}/runs"
    if not layout.fs.isdir(folder):
        return None
    candidates = []
    for p in layout.fs.ls(folder, detail=False):
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(".json") or name.startswith("."):
            continue
        run_id = name[: -len(".json")]
        if run_id == exclude_run:
            continue
        try:
            when = float(layout.fs.modified(p).timestamp())
        except (OSError, NotImplementedError):
            when = 0.0
        candidates.append((when, run_id, p))
    for _when, run_id, p in sorted(candidates, reverse=True):
        try:
            summary = _read_json(layout, p)["summary"]
            entry = next(s for s in summary["subsets"] if s["subset"] == subset)
        except (OSError, ValueError, KeyError, TypeError, StopIteration):
            continue
        if not entry.get("published"):
            continue
        stats = entry.get("stats") or {}
        try:
            return Baseline(
                run_id=str(summary.get("run_id") or run_id),
                rows=int(stats["lines"]),
                token_sum=int(stats.get("text_tokens", 0)) + int(stats.get("visual_tokens", 0)),
                rejected=int(stats.get("rejected", 0)),
            )
        except (KeyError, TypeError, ValueError):
            continue
    return None


# --------------------------------------------------------------------------------------------------------
# Data Docs

_REMOTE_TAG = re.compile(
    r"<link\b[^>]*\bhref=\"https?://[^\"]*\"[^>]*>|<script\b[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>",
    re.IGNORECASE,
)
_REMOTE_LOGO = re.compile(r"src=\"https?://great-expectations-web-assets[^\"]*/([\w.-]+?)(\?[^\"]*)?\"")

OFFLINE_CSS = """/* vlmforge: offline styling for Great Expectations pages (their CDN stylesheets are gone) */
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 1.5rem 2rem;
       color: #1d2330; line-height: 1.4; }
a { color: #1f5fbf; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #d4d8e0; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f1f3f7; }
nav, .navbar { border-bottom: 1px solid #d4d8e0; margin-bottom: 1rem; }
nav img { height: 40px; }
.alert { padding: .5rem .75rem; border-radius: 4px; background: #f1f3f7; margin: .5rem 0; }
.text-danger, .ge-failed-icon { color: #b3261e; }
.text-success { color: #1e7b34; }
.card { border: 1px solid #d4d8e0; border-radius: 4px; padding: .5rem .75rem; margin: .75rem 0; }
.sticky, .cooltip, .d-none { display: none; }
ol.breadcrumb { display: flex; gap: .5rem; list-style: none; padding: 0; }
footer { display: none; }
i.fas { font-style: normal; }
.fa-check-circle::before { content: "\\2714"; }
.fa-times::before { content: "\\2718"; }
"""

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


def _run_time_of(run_id: str) -> Any:
    import datetime as dt

    m = _RUN_ID_TIME.match(run_id)
    if m:
        try:
            return dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)


def _gx_site(root: Path, run: RunQuality) -> dict[tuple[str, str], str]:
    """Build Great Expectations' Data Docs for ``run`` into ``root``; returns the validation pages."""
    import great_expectations as gx
    from great_expectations.core.expectation_validation_result import (
        expectationSuiteValidationResultSchema,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.add_data_docs_site(
        SITE,
        {  # type: ignore[typeddict-unknown-key]
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(root)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    for name in SUITES:
        spec = load_suite(name)
        ctx.suites.add(
            gx.ExpectationSuite(name=name, expectations=spec["expectations"], meta={"notes": spec["notes"]})
        )
    run_identifier = RunIdentifier(run_name=run.run_id, run_time=_run_time_of(run.run_id))
    keys: dict[tuple[str, str], Any] = {}
    for sq in run.subsets.values():
        for result in sq.results:
            for suite, data in result.results.items():
                validation = expectationSuiteValidationResultSchema.load(
                    json.loads(json.dumps(data, default=str))
                )
                validation.meta["run_id"] = run_identifier
                validation.meta["batch_spec"] = {
                    "data_asset_name": f"{sq.subset} ({suite} profile)",
                    "batch_data": f"{suite} profile of subset {sq.subset}, aggregated by DuckDB",
                }
                key = ValidationResultIdentifier(
                    ExpectationSuiteIdentifier(name=suite), run_identifier, sq.subset
                )
                ctx.validation_results_store.set(key, validation)
                keys[(sq.subset, suite)] = key
    ctx.build_data_docs(site_names=[SITE])
    pages: dict[tuple[str, str], str] = {}
    for ident, key in keys.items():
        for site in ctx.get_docs_sites_urls(resource_identifier=key, site_name=SITE):
            url = site.get("site_url") or ""
            if url.startswith("file://"):
                pages[ident] = os.path.relpath(url[len("file://") :], root)
    return pages


def _offline(root: Path) -> None:
    """Drop the CDN stylesheets and scripts of every GX page and link a local stylesheet instead."""
    css = root / "static" / "styles" / "vlmforge-offline.css"
    css.parent.mkdir(parents=True, exist_ok=True)
    css.write_text(OFFLINE_CSS, encoding="utf-8")
    for page in root.rglob("*.html"):
        prefix = "../" * (len(page.relative_to(root).parts) - 1)
        text = page.read_text(encoding="utf-8")
        text = _REMOTE_TAG.sub("", text)
        text = _REMOTE_LOGO.sub(rf'src="{prefix}static/images/\1"', text)
        text = text.replace(
            "</head>",
            f'<link rel="stylesheet" href="{prefix}static/styles/vlmforge-offline.css">\n</head>',
            1,
        )
        page.write_text(text, encoding="utf-8")


def _status_html(status: str) -> str:
    cls = {"passed": "passed", "failed": "failed", "not run": "notrun"}.get(status, "skipped")
    return f'<span class="{cls}">{html.escape(status)}</span>'


def report_html(run: RunQuality, pages: Mapping[tuple[str, str], str]) -> str:
    """The run's report page: one row per subset, its suites (linked to the GX pages) and its failures."""
    esc = html.escape
    checked = [s for s in run.subsets.values() if s.passed is not None]
    passed = [s for s in checked if s.passed]
    lines = [
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
    for sq in run.subsets.values():
        suites = []
        for suite, ok in sq.suites.items():
            mark = "&#10004;" if ok else "&#10008;"
            cls = "passed" if ok else "failed"
            page = pages.get((sq.subset, suite))
            label = f'<span class="{cls}">{mark}</span> {esc(suite)}'
            suites.append(f'<a href="{esc(page)}">{label}</a>' if page else label)
        failures = "".join(f"<li>{esc(f)}</li>" for f in sq.failures)
        params = {k: v for r in sq.results for k, v in r.params.items()}
        details = (
            "<details><summary>parameters</summary><code>"
            + esc(", ".join(f"{k}={'no limit' if v is None else v}" for k, v in sorted(params.items())))
            + "</code></details>"
            if params
            else ""
        )
        lines.append(
            f"<tr><td><b>{esc(sq.subset)}</b></td><td>{_status_html(sq.status)}</td>"
            f'<td class="suites">{"".join(suites)}{details}</td>'
            f"<td>{'<ul class=failures>' + failures + '</ul>' if failures else ''}</td></tr>"
        )
    lines += ["</tbody></table>", "</body></html>"]
    return "\n".join(lines) + "\n"


def _update_index(layout: OutputLayout, run: RunQuality) -> None:
    path = f"{layout.quality}/{INDEX_FILE}"
    runs: list[dict[str, Any]] = []
    if layout.fs.isfile(path):
        try:
            runs = [r for r in _read_json(layout, path).get("runs", []) if r.get("run_id") != run.run_id]
        except (ValueError, OSError, AttributeError):
            runs = []
    runs.append(
        {
            "run_id": run.run_id,
            "recorded": _now(),
            "skip_gate": run.skip_gate,
            "subsets": {name: s.status for name, s in run.subsets.items()},
            "failed": run.failed,
            "docs": f"{run.run_id}/{DOCS}/index.html",
        }
    )
    _write_json(layout, path, {"runs": runs})


def build_data_docs(layout: OutputLayout, run_id: str) -> QualityDocs:
    """Build the run's Data Docs under ``OUT/quality/<run_id>/docs/`` and add the run to ``index.json``."""
    run = load_run(layout, run_id)
    dest = f"{run_folder(layout, run_id)}/{DOCS}"
    with tempfile.TemporaryDirectory(prefix="vlmforge-docs-") as tmp:
        root = Path(tmp) / DOCS
        root.mkdir()
        pages = _gx_site(root, run)
        _offline(root)
        (root / "index.html").replace(root / "gx-index.html")
        (root / "index.html").write_text(report_html(run, pages), encoding="utf-8")
        if is_local(layout.fs):
            staging = f"{dest}.staging-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(root, staging)
            old = f"{dest}.old-{os.getpid()}"
            if os.path.isdir(dest):
                os.replace(dest, old)
            os.replace(staging, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            for f in sorted(root.rglob("*")):
                if f.is_file():
                    layout.fs.put_file(str(f), f"{dest}/{f.relative_to(root).as_posix()}")
    run.docs = f"{dest}/index.html"
    _update_index(layout, run)
    url = Path(run.docs).resolve().as_uri() if is_local(layout.fs) else layout.fs.unstrip_protocol(run.docs)
    return QualityDocs(index=run.docs, url=url, pages=pages)


# --------------------------------------------------------------------------------------------------------
# Tables for people


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
