"""Data Docs over http on 127.0.0.1: ``vlmforge server --docs OUT [--docs OUT2]``.

A read-only static handler confined to each output folder's ``quality/`` (the runs' Data Docs and their
shared ``_assets/``), mounted under the folder's name::

    /                               the output folders served, with links to their runs
    /<name>/                        the runs of one folder (its ``quality/index.json``), newest first
    /<name>/<run>/docs/index.html   a run's report; its pages' assets under /<name>/_assets/...
    /_vlmforge_docs.json            the mounts (name -> quality folder): how a run finds its link

GET and HEAD only; a request whose ``Host`` is not the loopback address (DNS rebinding) or whose path has
``..``, a backslash or a NUL is refused, a resolved path outside the mount
(a symlink out) is not found, and a folder is never listed (its ``index.html`` or 404). Browsers get pages
that a ``file://`` link from the Prefect UI could not give them.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import http.client
import json
import mimetypes
import os
import re
import shutil
import tempfile
import threading
import urllib.request
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, unquote, urlsplit

LOOPBACK = "127.0.0.1"
MOUNTS_PATH = "/_vlmforge_docs.json"
MOUNTS_KIND = "vlmforge-docs"


def mount_names(outs: list[str], taken: set[str] | None = None) -> dict[str, Path]:
    """Each output folder's ``quality/`` under a URL-safe name (its folder name; ``-2``... when taken,
    here or in ``taken``)."""
    mounts: dict[str, Path] = {}
    for out in outs:
        root = Path(out).resolve()
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", root.name).strip(".-") or "out"
        name, n = base, 1
        while name in mounts or name in (taken or ()) or name.startswith("_"):
            n += 1
            name = f"{base}-{n}"
        mounts[name] = root / "quality"
    return mounts


@dataclass
class DocsServer:
    """A running docs server (a daemon thread of this process).

    Its mounts live in a file of its own (``mounts_file``, named by ``/_vlmforge_docs.json``), read again
    when it changes: a second ``vlmforge server --docs OUT2`` adds OUT2 there (:func:`add_to_running`)
    instead of failing on the taken port."""

    mounts: dict[str, Path]
    port: int = 0
    mounts_file: Path | None = None
    _httpd: ThreadingHTTPServer | None = field(default=None, repr=False)
    _seen: float = field(default=0.0, repr=False)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> DocsServer:
        handler = type("Handler", (_DocsHandler,), {"source": self})
        self._httpd = ThreadingHTTPServer((LOOPBACK, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        if self.mounts_file is None:
            self.mounts_file = Path(tempfile.mkdtemp(prefix="vlmforge-docs-")) / "mounts.json"
        _write_mounts(self.mounts_file, self.mounts)
        self._seen = self.mounts_file.stat().st_mtime
        threading.Thread(target=self._httpd.serve_forever, name="vlmforge-docs", daemon=True).start()
        return self

    def current(self) -> dict[str, Path]:
        """The mounts, as the mounts file says now."""
        if self.mounts_file is not None:
            with contextlib.suppress(OSError, ValueError):
                changed = self.mounts_file.stat().st_mtime
                if changed != self._seen:
                    self.mounts = _read_mounts(self.mounts_file)
                    self._seen = changed
        return self.mounts

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self.mounts_file is not None:
            shutil.rmtree(self.mounts_file.parent, ignore_errors=True)


def _read_mounts(path: Path) -> dict[str, Path]:
    return {k: Path(v) for k, v in json.loads(path.read_text(encoding="utf-8")).items()}


def _write_mounts(path: Path, mounts: dict[str, Path]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: str(v) for k, v in mounts.items()}), encoding="utf-8")
    os.replace(tmp, path)


def add_to_running(base_url: str, outs: list[str], timeout_s: float = 2.0) -> dict[str, Path] | None:
    """Add ``outs`` to the docs server of this user answering at ``base_url``; returns the mounts added
    (those already served left out), or None when no such server answers there."""
    try:
        with urllib.request.urlopen(base_url + MOUNTS_PATH, timeout=timeout_s) as resp:  # noqa: S310
            doc = json.loads(resp.read())
    except (OSError, ValueError, http.client.HTTPException):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != MOUNTS_KIND or not doc.get("mounts_file"):
        return None
    path = Path(doc["mounts_file"])
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = _read_mounts(path)
        except (OSError, ValueError):  # another user's server, or gone: not ours to change
            return None
        served = set(current.values())
        wanted = mount_names(list(outs), taken=set(current))
        added = {k: v for k, v in wanted.items() if v not in served}
        _write_mounts(path, current | added)
    return added


class _DocsHandler(BaseHTTPRequestHandler):
    source: DocsServer

    @property
    def mounts(self) -> dict[str, Path]:
        return self.source.current()

    server_version = "vlmforge-docs"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: no line per request
        return

    def _answer(self, body: bool) -> None:
        port = cast(ThreadingHTTPServer, self.server).server_port
        if self.headers.get("Host", "") not in (f"{LOOPBACK}:{port}", f"localhost:{port}"):
            # a page elsewhere that rebinds its own name to 127.0.0.1 does not get to read the docs
            return self._send(HTTPStatus.FORBIDDEN, b"refused: not a loopback host\n", "text/plain", body)
        raw = urlsplit(self.path).path
        path = unquote(raw)
        parts = path.split("/")[1:]
        if any(p in ("..", ".") or "\\" in p or "\0" in p for p in parts):
            return self._send(HTTPStatus.FORBIDDEN, b"refused: .. in the path\n", "text/plain", body)
        if path == "/":
            return self._send(HTTPStatus.OK, self._mounts_page(), "text/html; charset=utf-8", body)
        if path == MOUNTS_PATH:
            doc = {
                "kind": MOUNTS_KIND,
                "mounts": {k: str(v) for k, v in self.mounts.items()},
                "mounts_file": str(self.source.mounts_file),  # where `server --docs OUT2` adds OUT2
            }
            return self._send(HTTPStatus.OK, json.dumps(doc).encode(), "application/json", body)
        root = self.mounts.get(parts[0])
        if root is None:
            return self._not_found(body)
        rest = [p for p in parts[1:] if p]
        if not rest:
            if not path.endswith("/"):
                return self._redirect(raw + "/")
            return self._send(HTTPStatus.OK, self._runs_page(root), "text/html; charset=utf-8", body)
        target = root.joinpath(*rest)
        try:
            resolved = target.resolve(strict=True)
        except (OSError, RuntimeError):
            return self._not_found(body)
        if not resolved.is_relative_to(root.resolve()):
            return self._not_found(body)  # a symlink out of the mount
        if resolved.is_dir():
            if not path.endswith("/"):
                return self._redirect(raw + "/")
            resolved = resolved / "index.html"
            if not resolved.is_file():
                return self._not_found(body)  # never a listing
        if not resolved.is_file():
            return self._not_found(body)
        kind = mimetypes.guess_type(resolved.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/json", "application/javascript"):
            kind += "; charset=utf-8"
        immutable = len(rest) > 1 and rest[0] == "_assets"  # content-addressed
        return self._send(HTTPStatus.OK, resolved.read_bytes(), kind, body, immutable=immutable)

    def _mounts_page(self) -> bytes:
        items = "".join(
            f'<li><a href="/{quote(name)}/">{html.escape(name)}</a> {html.escape(str(root.parent))}</li>'
            for name, root in self.mounts.items()
        )
        return _page("vlmforge Data Docs", f"<ul>{items}</ul>")

    def _runs_page(self, root: Path) -> bytes:
        try:
            runs = json.loads((root / "index.json").read_text(encoding="utf-8")).get("runs", [])
        except (OSError, ValueError, AttributeError):
            runs = []
        items = "".join(
            f'<li><a href="{quote(str(r.get("docs", "")))}">{html.escape(str(r.get("run_id")))}</a>'
            f" {html.escape(str(r.get('recorded', '')))}"
            + (f" held back: {html.escape(', '.join(r['failed']))}" if r.get("failed") else "")
            + "</li>"
            for r in reversed(runs)
            if isinstance(r, dict)
        )
        return _page(f"Data Docs of {root.parent}", f"<ul>{items or '<li>no run yet</li>'}</ul>")

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.MOVED_PERMANENTLY)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _not_found(self, body: bool) -> None:
        self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain", body)

    def _send(self, status: HTTPStatus, data: bytes, kind: str, body: bool, immutable: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Content-Type-Options", "nosniff")
        if immutable:
            self.send_header("Cache-Control", "public, max-age=31536000, immutable")
        self.end_headers()
        if body:
            self.wfile.write(data)


def _page(title: str, content: str) -> bytes:
    t = html.escape(title)
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{t}</title></head>'
        f"<body><h1>{t}</h1>{content}</body></html>"
    ).encode()
