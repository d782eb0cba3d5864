"""The revision a release is pinned to, read from its URL or folder (recorded in every subset entry).

A run is reproducible only against the same upstream bytes; the revision says which ones: the ``@rev`` of an
``hf://`` URL, the commit of a Hugging Face cache snapshot folder, or a git checkout's HEAD.
"""

from __future__ import annotations

import re
import urllib.parse

from fsspec import AbstractFileSystem

from ..storage import is_local

_HF_RELEASE_RE = re.compile(
    r"^hf://(?:(datasets|models|spaces)/)?([^/@]+/[^/@]+)(?:@([^/]+))?", re.IGNORECASE
)
_SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")


def release_revision(
    release: str, fs: AbstractFileSystem | None = None, root: str | None = None
) -> str | None:
    """The revision a release is pinned to, when it says one.

    ``hf://datasets/<org>/<name>@<rev>`` gives ``<rev>`` (URL-decoded: ``refs%2Fpr%2F9`` is
    ``refs/pr/9``); a Hugging Face cache snapshot folder (``.../snapshots/<commit>``) gives its commit;
    a git checkout gives its HEAD commit. Anything else: None.
    """
    m = _HF_RELEASE_RE.match(release)
    if m:
        return urllib.parse.unquote(m.group(3)) if m.group(3) else None
    path = root if root is not None else release
    m2 = _SNAPSHOT_RE.search(path.rstrip("/") + "/")
    if m2:
        return m2.group(1)
    if fs is not None and is_local(fs):
        return _git_head(fs, path)
    return None


def _git_head(fs: AbstractFileSystem, root: str) -> str | None:
    git = f"{root}/.git"
    try:
        head = fs.cat_file(f"{git}/HEAD").decode().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        if fs.exists(f"{git}/{ref}"):
            return str(fs.cat_file(f"{git}/{ref}").decode().strip()) or None
        if fs.exists(f"{git}/packed-refs"):
            for line in fs.cat_file(f"{git}/packed-refs").decode().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha
    except (OSError, UnicodeDecodeError):
        return None
    return None
