"""Catalog stage: list a release's subsets with content hashes, row counts, license and batch plan.

One streaming pass over each JSONL hashes it, counts its lines and records where every batch of
``batch_lines`` lines starts, so parse batches can later seek straight to their bytes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from fsspec import AbstractFileSystem

from vlmforge.schemas.records import SubsetEntry
from vlmforge.tasks.errors import ReleaseError
from vlmforge.tasks.storage import url_to_fs

CHUNK = 8 * 1024 * 1024

# SPDX ids we recognise in a README, longest first so CC-BY-SA-4.0 is not read as CC-BY-4.0.
_SPDX = (
    "CC-BY-NC-SA-4.0",
    "CC-BY-NC-ND-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-SA-4.0",
    "CC-BY-SA-3.0",
    "CC-BY-ND-4.0",
    "CC-BY-4.0",
    "CC-BY-3.0",
    "CC-BY-2.0",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "CDLA-Permissive-1.0",
    "CDLA-Sharing-1.0",
    "ODC-By-1.0",
    "ODbL-1.0",
    "Apache-2.0",
    "MIT",
    "BSD-3-Clause",
    "BSD-2-Clause",
    "GPL-3.0",
    "GPL-2.0",
    "LGPL-3.0",
    "AGPL-3.0",
    "OpenRAIL",
)
_SPDX_RE = re.compile(
    r"(?<![A-Za-z0-9-])(" + "|".join(re.escape(s) for s in _SPDX) + r")(?![A-Za-z0-9.-]*\d)", re.IGNORECASE
)
_LICENSE_LINE = re.compile(r"^\W*(?:license|licence|terms)\b\W*(.*)$", re.IGNORECASE | re.MULTILINE)


def detect_license(readme: str) -> tuple[str, str | None]:
    """SPDX id named by the README's license line (or anywhere in it), else ``unknown`` and its words."""
    lines = [m.group(1).strip() for m in _LICENSE_LINE.finditer(readme)]
    for text in [*lines, readme]:
        m = _SPDX_RE.search(text)
        if m:
            canonical = next(s for s in _SPDX if s.lower() == m.group(1).lower())
            return canonical, None
    words = next((line for line in lines if line), None)
    return "unknown", words[:500] if words else None


def scan_jsonl(fs: AbstractFileSystem, path: str, batch_lines: int) -> tuple[str, int, int, tuple[int, ...]]:
    """(sha256, size, lines, batch offsets) of a JSONL file in one streaming pass.

    A final line without a trailing newline counts as a line; a trailing newline does not start one.
    """
    h = hashlib.sha256()
    offsets = [0]
    lines = 0  # newlines seen so far
    need = batch_lines  # newline count at which the next batch starts
    pos = 0
    last = b"\n"
    with fs.open(path, "rb", block_size=CHUNK) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            start = 0
            while lines + chunk.count(b"\n", start) >= need:
                idx = start
                for _ in range(need - lines):
                    idx = chunk.index(b"\n", idx) + 1
                offsets.append(pos + idx)
                lines, start, need = need, idx, need + batch_lines
            lines += chunk.count(b"\n", start)
            pos += len(chunk)
            last = chunk[-1:]
    if last != b"\n":
        lines += 1  # unterminated final line
    if offsets[-1] != pos:
        offsets.append(pos)
    return h.hexdigest(), pos, lines, tuple(offsets)


def _sha256_file(fs: AbstractFileSystem, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def list_subset_names(fs: AbstractFileSystem, root: str) -> list[str]:
    """Folders of the release that hold ``<name>/<name>.jsonl``, sorted."""
    names = []
    for entry in fs.ls(root, detail=True):
        if entry["type"] != "directory":
            continue
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            continue
        if fs.exists(f"{root}/{name}/{name}.jsonl"):
            names.append(name)
    return sorted(names)


def catalog_release(
    release: str, *, subsets: Iterable[str] = (), batch_lines: int = 2000
) -> list[SubsetEntry]:
    """Catalog every subset of ``release`` (or the named ones), without touching media."""
    fs, root = url_to_fs(release)
    if not fs.isdir(root):
        raise ReleaseError(f"release {release!r} is not a folder (expected one folder per subset)")
    available = list_subset_names(fs, root)
    wanted = list(subsets) or available
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise ReleaseError(
            f"subset(s) {', '.join(unknown)} not found in {release!r}; "
            f"available: {', '.join(available) or '(none: no <name>/<name>.jsonl found)'}"
        )
    entries = []
    for name in sorted(set(wanted)):
        folder = f"{root}/{name}"
        jsonl = f"{folder}/{name}.jsonl"
        readme_path = f"{folder}/README.md"
        readme_sha, license_id, license_text = None, "unknown", None
        if fs.exists(readme_path):
            raw = fs.cat_file(readme_path)
            readme_sha = hashlib.sha256(raw).hexdigest()
            license_id, license_text = detect_license(raw.decode("utf-8", errors="replace"))
        sha, size, rows, offsets = scan_jsonl(fs, jsonl, batch_lines)
        tars: tuple[str, ...] = ()
        if fs.isdir(f"{folder}/media"):
            tars = tuple(
                sorted(p for p in fs.glob(f"{folder}/media/shard_*.tar") if fs.isfile(p))
            )
        entries.append(
            SubsetEntry(
                subset=name,
                path=folder,
                jsonl=jsonl,
                readme_sha256=readme_sha,
                jsonl_sha256=sha,
                jsonl_bytes=size,
                rows=rows,
                license=license_id,
                license_text=license_text,
                media_tars=tars,
                batch_offsets=offsets,
            )
        )
    return entries
