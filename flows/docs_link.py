"""The link to a run's Data Docs: over http when a ``vlmforge server --docs`` serves the output folder, else
the file and how to serve it.

A browser does not open a ``file://`` link from the Prefect UI's page. Where a docs server may be: the URL
in ``VLMFORGE_DOCS_URL``, else next to the Prefect API the run reports to (``vlmforge server --port P``
serves the docs on ``P+1`` unless told otherwise). The server is asked which folders it serves
(``/_vlmforge_docs.json``, a loopback request of at most a second); a run into a folder it does not serve
keeps the file path.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.request
from pathlib import Path
from urllib.parse import quote, urlsplit

from .runtime.docs_server import LOOPBACK, MOUNTS_KIND, MOUNTS_PATH, mount_names

DOCS_URL_ENV = "VLMFORGE_DOCS_URL"
DEFAULT_UI_PORT = 4200


def docs_port_for(ui_port: int) -> int:
    """The docs port ``vlmforge server --port P`` uses unless ``--docs-port`` says otherwise."""
    return ui_port + 1


def candidate_bases(api_url: str | None) -> list[str]:
    """Where a docs server may answer: ``VLMFORGE_DOCS_URL``, else beside a loopback Prefect API."""
    if os.environ.get(DOCS_URL_ENV):
        return [os.environ[DOCS_URL_ENV].rstrip("/")]
    bases = []
    parts = urlsplit(api_url or "")
    if parts.hostname in (LOOPBACK, "localhost") and parts.port is not None:
        bases.append(f"http://{LOOPBACK}:{docs_port_for(parts.port)}")
    default = f"http://{LOOPBACK}:{docs_port_for(DEFAULT_UI_PORT)}"  # a plain `vlmforge server --docs OUT`
    return bases + ([default] if default not in bases else [])


def served_docs_url(out: str, run_id: str, api_url: str | None, timeout_s: float = 1.0) -> str | None:
    """The http URL of the run's report when a docs server serves ``out``, else None."""
    if "://" in out:
        return None
    quality = (Path(out).resolve() / "quality").as_posix()
    for base in candidate_bases(api_url):
        try:
            with urllib.request.urlopen(base + MOUNTS_PATH, timeout=timeout_s) as resp:  # noqa: S310
                doc = json.loads(resp.read())
        except (OSError, ValueError, http.client.HTTPException):  # nothing there, or not a docs server
            continue
        if not isinstance(doc, dict) or doc.get("kind") != MOUNTS_KIND:
            continue
        for name, folder in dict(doc.get("mounts") or {}).items():
            if folder == quality:
                return f"{base}/{quote(name)}/{quote(run_id)}/docs/index.html"
    return None


def serve_hint(out: str) -> str:
    """How to see a run's docs over http afterwards."""
    port = docs_port_for(DEFAULT_UI_PORT)
    name = quote(next(iter(mount_names([out]))))
    return f"serve them over http: vlmforge server --docs {out} (then http://{LOOPBACK}:{port}/{name}/)"


def docs_line(out: str, run_id: str, api_url: str | None) -> str | None:
    """The terminal's line about the run's Data Docs (None when none were built)."""
    served = served_docs_url(out, run_id, api_url)
    if served:
        return f"Data Docs: {served}"
    index = Path(out) / "quality" / run_id / "docs" / "index.html"
    if "://" in out or not index.is_file():
        return None
    return f"Data Docs: {index}; {serve_hint(out)}"
