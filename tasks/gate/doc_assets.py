"""The static files of Data Docs pages, shared by every run of an output folder instead of copied per run.

Great Expectations writes ~4 MB of ``static/`` (fonts, GIFs, stylesheets) into every site it builds; once its
CDN tags are gone (:mod:`.docs`) the pages use three of those files: the offline stylesheet, the logo and
the favicon. Those are written once per output folder, under a folder named by their content::

    OUT/quality/_assets/<digest>/styles/vlmforge-offline.css
    OUT/quality/_assets/<digest>/images/logo-long.png ...

and every page refers to them relatively (``../../_assets/<digest>/...`` from a run's ``docs/``), so the
docs open from the disk and from ``vlmforge server --docs OUT`` alike. The same files give the same digest: a
rerun writes nothing new; a Great Expectations upgrade that changes a file gets a folder of its own and the
pages of older runs keep theirs.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..manifests import OutputLayout
from ..storage import atomic_write_bytes

ASSETS = "_assets"
# a page's reference into GX's static folder, however deep GX thought the page was (its favicon link
# is one level short on validation pages)
_STATIC_REF = re.compile(r'(href|src)="(?:\./)?(?:\.\./)*static/([^"#?]+)"')


@dataclass(frozen=True)
class SharedAssets:
    """The files the pages of one run use, by path under ``_assets/<digest>/``."""

    digest: str
    files: dict[str, bytes]

    def folder(self, layout: OutputLayout) -> str:
        return f"{layout.quality}/{ASSETS}/{self.digest}"


def share_assets(root: Path) -> SharedAssets:
    """Point the pages under ``root`` (a run's docs, two levels below ``OUT/quality``) at the shared assets
    and drop ``root/static``; returns the files the pages use."""
    static = root / "static"
    pages = sorted(root.rglob("*.html"))
    used = sorted({m.group(2) for page in pages for m in _STATIC_REF.finditer(page.read_text("utf-8"))})
    files = {name: (static / name).read_bytes() for name in used if (static / name).is_file()}
    digest = _digest(files)
    for page in pages:
        shared = "../" * (len(page.relative_to(root).parts) - 1) + f"../../{ASSETS}/{digest}/"
        page.write_text(_pointed_at(page.read_text(encoding="utf-8"), shared, files), encoding="utf-8")
    shutil.rmtree(static, ignore_errors=True)
    return SharedAssets(digest, files)


def install_assets(layout: OutputLayout, assets: SharedAssets) -> str:
    """Write the assets under ``OUT/quality/_assets/<digest>/`` unless there already; returns the folder."""
    folder = assets.folder(layout)
    for name, data in assets.files.items():
        path = f"{folder}/{name}"
        if not layout.fs.isfile(path):  # content-addressed: a file there has these bytes
            atomic_write_bytes(layout.fs, path, data)
    return folder


def _pointed_at(text: str, shared: str, files: dict[str, bytes]) -> str:
    """``text`` with each reference to a static file in ``files`` made relative to ``shared``."""

    def repl(m: re.Match[str]) -> str:
        return f'{m.group(1)}="{shared}{m.group(2)}"' if m.group(2) in files else m.group(0)

    return _STATIC_REF.sub(repl, text)


def _digest(files: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()[:16]
