"""Data Docs of a run: Great Expectations' pages made to open offline, under our own report page.

Layout under ``OUT/quality/<run>/docs/``::

    index.html                      the run's report (:func:`.report.report_html`): JS-free, opens offline
    gx-index.html                   Great Expectations' own site index (needs its CDN scripts)
    validations/...                 Great Expectations' validation pages (remote CSS/JS removed)

The pages' stylesheet and images are not in the run's folder: they are shared by every run of the output
folder under ``OUT/quality/_assets/<digest>/`` (:mod:`.doc_assets`), referred to relatively, so a run's docs
open from the disk and over http (``vlmforge server --docs OUT``) alike.

GX renders its site from the recorded results (not from a live validation), so the docs of any past run can
be rebuilt. The site is built in a temporary folder and installed whole: a reader never sees half of it.
``OUT/quality/index.json`` lists every run whose docs were built.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..manifests import OutputLayout
from ..storage import is_local
from .doc_assets import install_assets, share_assets
from .gate_report import QualityDocs, report_html
from .groups import GROUP_META
from .gx import GX_LOCK, quiet_context
from .results import DOCS, RunQuality, load_run, now, read_json, run_folder, write_json
from .suites import SUITES, load_suite

SITE = "vlmforge"
INDEX_FILE = "index.json"
_RUN_ID_TIME = re.compile(r"^(\d{8}T\d{6})")
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


def build_data_docs(layout: OutputLayout, run_id: str) -> QualityDocs:
    """Build the run's Data Docs under ``OUT/quality/<run_id>/docs/`` and add the run to ``index.json``."""
    run = load_run(layout, run_id)
    dest = f"{run_folder(layout, run_id)}/{DOCS}"
    with tempfile.TemporaryDirectory(prefix="vlmforge-docs-") as tmp:
        root = Path(tmp) / DOCS
        root.mkdir()
        pages = _render(root, run)
        install_assets(layout, share_assets(root))  # before the pages that refer to them
        _install(layout, root, dest)
    run.docs = f"{dest}/index.html"
    _update_index(layout, run)
    url = Path(run.docs).resolve().as_uri() if is_local(layout.fs) else layout.fs.unstrip_protocol(run.docs)
    return QualityDocs(index=run.docs, url=url, pages=pages)


def _render(root: Path, run: RunQuality) -> dict[tuple[str, str], str]:
    """GX's site made offline, its index moved aside for our report; returns the validation pages."""
    pages = _gx_site(root, run)
    _offline(root)
    (root / "index.html").replace(root / "gx-index.html")
    (root / "index.html").write_text(report_html(run, pages), encoding="utf-8")
    return pages


def _install(layout: OutputLayout, root: Path, dest: str) -> None:
    """Put the rendered folder at ``dest``: swapped in whole on a local disk, file by file elsewhere."""
    if not is_local(layout.fs):
        for f in sorted(root.rglob("*")):
            if f.is_file():
                layout.fs.put_file(str(f), f"{dest}/{f.relative_to(root).as_posix()}")
        return
    staging = f"{dest}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(root, staging)
    old = f"{dest}.old-{os.getpid()}"
    if os.path.isdir(dest):
        os.replace(dest, old)
    os.replace(staging, dest)
    shutil.rmtree(old, ignore_errors=True)


def _update_index(layout: OutputLayout, run: RunQuality) -> None:
    """Add (or replace) the run's entry in ``OUT/quality/index.json``."""
    path = f"{layout.quality}/{INDEX_FILE}"
    runs: list[dict[str, Any]] = []
    if layout.fs.isfile(path):
        try:
            runs = [r for r in read_json(layout, path).get("runs", []) if r.get("run_id") != run.run_id]
        except (ValueError, OSError, AttributeError):
            runs = []
    runs.append(
        {
            "run_id": run.run_id,
            "recorded": now(),
            "skip_gate": run.skip_gate,
            "subsets": {name: s.status for name, s in run.subsets.items()},
            "failed": run.failed,
            "docs": f"{run.run_id}/{DOCS}/index.html",
        }
    )
    write_json(layout, path, {"runs": runs})


# --------------------------------------------------------------------------------------------------------
# Great Expectations' site


def _gx_site(root: Path, run: RunQuality) -> dict[tuple[str, str], str]:
    """Build Great Expectations' Data Docs for ``run`` into ``root``; returns the validation pages."""
    with GX_LOCK:
        ctx = _site_context(root)
        _add_suites(ctx)
        keys = _store_results(ctx, run)
        ctx.build_data_docs(site_names=[SITE])
        return _page_paths(ctx, keys, root)


def _site_context(root: Path) -> Any:
    """A quiet GX context whose one Data Docs site is written to ``root``."""
    ctx = quiet_context()
    ctx.add_data_docs_site(
        SITE,
        {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(root)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        },
    )
    return ctx


def _add_suites(ctx: Any) -> None:
    """Every suite, with its notes, so the site has a page per suite."""
    import great_expectations as gx

    for name in SUITES:
        spec = load_suite(name)
        ctx.suites.add(
            gx.ExpectationSuite(name=name, expectations=spec["expectations"], meta={"notes": spec["notes"]})
        )


def _store_results(ctx: Any, run: RunQuality) -> dict[tuple[str, str], Any]:
    """The run's recorded validation results in GX's store; returns their keys by (subset, suite).

    Each recorded result is GX's own JSON (``to_json_dict``), so it goes into the store's backend as that
    JSON, which the site builder loads as it loads any stored result. Through ``store.set`` each was loaded
    into objects and serialised back (a deep copy and a marshmallow dump): 37% of building the Data Docs of
    76 subsets (304 results), for the same stored text."""
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    run_identifier = RunIdentifier(run_name=run.run_id, run_time=_run_time_of(run.run_id))
    store = ctx.validation_results_store
    keys: dict[tuple[str, str], Any] = {}
    for sq in run.subsets.values():
        for result in sq.results:
            for suite, data in result.results.items():
                meta = dict(data.get("meta") or {})
                meta["run_id"] = run_identifier.to_json_dict()
                meta["batch_spec"] = _batch_spec(sq.subset, suite, meta)
                key = ValidationResultIdentifier(
                    ExpectationSuiteIdentifier(name=suite), run_identifier, sq.subset
                )
                text = json.dumps(data | {"meta": meta}, indent=2, sort_keys=True, default=str)
                store.store_backend.set(store.key_to_tuple(key), text)
                keys[(sq.subset, suite)] = key
    return keys


def _batch_spec(subset: str, suite: str, meta: dict[str, Any]) -> dict[str, str]:
    """What the page says was validated: the subset's profile, or the profiles of its gate group."""
    group = (meta.get(GROUP_META) or {}).get("subsets")
    if group:
        names = ", ".join(group)
        data = f"{suite} profiles of {len(group)} subsets in one validation ({names}), aggregated by DuckDB"
    else:
        data = f"{suite} profile of subset {subset}, aggregated by DuckDB"
    return {"data_asset_name": f"{subset} ({suite} profile)", "batch_data": data}


def _run_time_of(run_id: str) -> dt.datetime:
    """The time in a run id (``20260102T030405-...``), else now: GX files validations under it."""
    m = _RUN_ID_TIME.match(run_id)
    if m:
        try:
            return dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=dt.UTC)
        except ValueError:
            pass
    return dt.datetime.now(dt.UTC)


def _page_paths(ctx: Any, keys: dict[tuple[str, str], Any], root: Path) -> dict[tuple[str, str], str]:
    """Each stored result's page, relative to ``root``."""
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
