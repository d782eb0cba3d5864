"""What in a media store no output references, and removing exactly that (``vlmforge store clean``).

The store (``tasks/storage.py``) holds objects ``<root>/<sha[:2]>/<sha>`` and the upstream index
``<root>/upstream/<h[:2]>/<h>.json`` (an upstream locator -> its object's sha256). An object is kept when:

- a row of an output's ``media`` manifest names it (``sha256``, ``out_sha256``, ``frame_sha256``), in any
  part, published or not: the committed batches of a subset still in flight keep their objects, so a resume
  finds them and fetches nothing again;
- a staged subset names it (``OUT/staging/``: a stamp's ``objects`` and the staged JSONL's
  ``store/<sha256>/<name>`` references), staged and not yet batched;
- it is the cached central directory of a zip whose members a manifest row came from.

Everything else is a candidate. Removing one removes its object file and its upstream-index entries, nothing
else: files of other names (partial downloads, locks, temporary files) are left, a symlink is neither
followed nor removed, and a path whose folder resolves outside the store root is refused. Local stores only:
an object store has no run lock to say that nobody is writing.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..catalog import last_run_options
from ..errors import OutputError
from ..manifests import OutputLayout, read_table
from ..storage import UPSTREAM_INDEX, ContentStore

_HEX2 = re.compile(r"^[0-9a-f]{2}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")
_STAGED_REF = re.compile(r"store/([0-9a-f]{64})/")
ZIP_DIRECTORY = "zip-central-directory:"  # tasks/fetch/zip_fetch.py's index key of a zip's directory


@dataclass
class References:
    """What the named outputs reference in a store: object sha256s and the archives members came from."""

    objects: set[str] = field(default_factory=set)
    archives: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Unreferenced:
    """One object no output references: its file, size and upstream-index entries."""

    sha256: str
    path: str
    bytes: int
    index_entries: tuple[str, ...] = ()
    upstream: str | None = None  # what the index says it was fetched from


@dataclass
class CleanPlan:
    """The store's objects and the ones no output references (``candidates``, in path order)."""

    root: str
    objects: int = 0
    object_bytes: int = 0
    candidates: list[Unreferenced] = field(default_factory=list)

    @property
    def candidate_bytes(self) -> int:
        return sum(c.bytes for c in self.candidates)


def store_of(out: str) -> str:
    """The store ``out``'s newest run used (its ``--store``), else the default ``OUT/store``."""
    options = last_run_options(out) or {}
    fetch = options.get("fetch")
    store = fetch.get("store") if isinstance(fetch, dict) else None
    return str(store) if store else OutputLayout(out).store


def references(out: str) -> References:
    """Every store object the output ``out`` names (see the module's docstring)."""
    refs = References()
    layout = OutputLayout(out)
    columns = ["sha256", "out_sha256", "frame_sha256", "upstream"]
    for subset in layout.subsets_with("media"):
        tbl = read_table(layout, "media", subset, columns=columns)
        refs.objects.update(s for s in tbl["sha256"].to_pylist() if s)
        refs.objects.update(s for s in tbl["out_sha256"].to_pylist() if s)
        for frames in tbl["frame_sha256"].to_pylist():
            refs.objects.update(s for s in frames or () if s)
        refs.archives.update(u.split("#", 1)[0] for u in tbl["upstream"].to_pylist() if u and "#" in u)
    staging = f"{layout.root}/staging"
    if layout.fs.isdir(staging):
        for path in layout.fs.find(staging):
            if path.endswith(".jsonl"):
                with layout.fs.open(path, "rt", encoding="utf-8", errors="replace") as f:
                    for line in f:
                        refs.objects.update(_STAGED_REF.findall(line))
            elif path.endswith(".json"):
                refs.objects.update(_stamp_objects(layout.fs.cat_file(path)))
    return refs


def _stamp_objects(raw: bytes) -> list[str]:
    try:
        doc = json.loads(raw)
    except ValueError:
        return []
    objects = doc.get("objects") if isinstance(doc, dict) else None
    return [s for s in objects if isinstance(s, str) and _SHA.match(s)] if isinstance(objects, list) else []


def local_root(store: str) -> str:
    """The store's folder, resolved; an :class:`OutputError` for a store that is not a local folder."""
    content = ContentStore(store)
    if not content.local:
        raise OutputError(f"store clean works on a local store only; {store} is not local")
    return os.path.realpath(content.root)


def _files(folder: str) -> Iterator[os.DirEntry[str]]:
    """Regular files and folders of ``folder``, never through a symlink."""
    try:
        with os.scandir(folder) as it:
            yield from (e for e in it if not e.is_symlink())
    except (FileNotFoundError, NotADirectoryError):
        return


def _objects(root: str) -> Iterator[tuple[str, str, int]]:
    """(sha256, path, bytes) of every object file ``<root>/<sha[:2]>/<sha>``."""
    for folder in sorted(_files(root), key=lambda e: e.name):
        if not (_HEX2.match(folder.name) and folder.is_dir(follow_symlinks=False)):
            continue
        for entry in sorted(_files(folder.path), key=lambda e: e.name):
            if (
                _SHA.match(entry.name)
                and entry.name[:2] == folder.name
                and entry.is_file(follow_symlinks=False)
            ):
                yield entry.name, entry.path, entry.stat(follow_symlinks=False).st_size


def _index(root: str) -> dict[str, list[tuple[str, str]]]:
    """sha256 -> [(entry path, upstream locator)] of the upstream index (unreadable entries left out)."""
    by_sha: dict[str, list[tuple[str, str]]] = {}
    for folder in _files(f"{root}/{UPSTREAM_INDEX}"):
        if not (_HEX2.match(folder.name) and folder.is_dir(follow_symlinks=False)):
            continue
        for entry in _files(folder.path):
            if not (entry.name.endswith(".json") and entry.is_file(follow_symlinks=False)):
                continue
            try:
                with open(entry.path, "rb") as f:
                    doc = json.loads(f.read())
                sha, upstream = str(doc["sha256"]), str(doc.get("upstream", ""))
            except (OSError, ValueError, TypeError, KeyError):
                continue
            by_sha.setdefault(sha, []).append((entry.path, upstream))
    return by_sha


def plan_clean(store: str, outs: Iterable[str]) -> CleanPlan:
    """The objects of the local ``store`` that none of ``outs`` references."""
    root = local_root(store)
    refs = References()
    for out in outs:
        found = references(out)
        refs.objects |= found.objects
        refs.archives |= found.archives
    index = _index(root)
    plan = CleanPlan(root)
    for sha, path, size in _objects(root):
        plan.objects += 1
        plan.object_bytes += size
        entries = index.get(sha, [])
        if sha in refs.objects or any(_directory_of(u) in refs.archives for _, u in entries):
            continue
        upstream = next((u for _, u in sorted(entries) if u), None)
        plan.candidates.append(Unreferenced(sha, path, size, tuple(sorted(p for p, _ in entries)), upstream))
    return plan


def _directory_of(upstream: str) -> str | None:
    return upstream[len(ZIP_DIRECTORY) :] if upstream.startswith(ZIP_DIRECTORY) else None


def remove_unreferenced(plan: CleanPlan) -> tuple[int, int]:
    """Remove the plan's candidates (object files, then their index entries): (objects removed, bytes)."""
    removed = freed = 0
    for item in plan.candidates:
        if _remove_inside(plan.root, item.path):
            removed += 1
            freed += item.bytes
            for entry in item.index_entries:
                _remove_inside(plan.root, entry)
    return removed, freed


def _remove_inside(root: str, path: str) -> bool:
    """Unlink ``path`` when it is a regular file (not a symlink) whose folder resolves inside ``root``."""
    folder = os.path.realpath(os.path.dirname(path))
    if os.path.commonpath([root, folder]) != root or folder == root:
        raise OutputError(f"refusing to remove {path}: it is not inside the store {root}")
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        os.unlink(path)
    except FileNotFoundError:  # gone already
        return False
    return True
