"""Catalog stage: list a release's subsets with content hashes, row counts, license and batch plan.

The release is a local folder or any fsspec URL (``hf://datasets/<org>/<name>@<revision>``,
``s3://bucket/prefix``, ``file://...``), read through one code path; ``storage_options`` are passed to
fsspec (s3 endpoint, profile, ...) and travel with each entry so workers open the same files. A subset is a
folder ``<name>/`` holding ``<name>.jsonl``, optionally its ``README.md`` (license, upstream media sources)
and ``media/shard_*.tar``. Nothing here touches media.

Each subset entry is put together from one job per module: ``scan.py`` (hash, rows, batch offsets,
duplicates), ``licenses.py``, ``media_sources.py`` and ``revision.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem

from ...schemas.config import DEFAULT_BATCH_LINES, DEFAULT_BATCH_MEDIA
from ...schemas.records import SubsetEntry
from ...schemas.redact import scrub, secret_values
from ...schemas.subset_names import normalise_subset_name, subset_name_problem
from ..errors import ReleaseError
from ..storage import is_local, url_to_fs
from .licenses import detect_license
from .media_sources import find_media_sources
from .recipe_fingerprints import recipe_fingerprints_of
from .revision import release_revision
from .scan import scan_subset_jsonl


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
    release: str,
    *,
    subsets: Iterable[str] = (),
    batch_lines: int = DEFAULT_BATCH_LINES,
    storage_options: Mapping[str, Any] | None = None,
    recipe_dirs: Sequence[str | Path] = (),
    dedup: bool = True,
    batch_media: int | None = DEFAULT_BATCH_MEDIA,
    min_batches: int = 1,
    limit: int | None = None,
) -> list[SubsetEntry]:
    """Catalog every subset of ``release`` (or the named ones), without touching media.

    ``release`` is a folder or an fsspec URL; ``storage_options`` go to fsspec and are carried by every
    entry. Each subset's media recipe, found as a run finds it (the first of ``recipe_dirs``, then the
    shipped recipes), is fingerprinted into its entry, so a refresh sees a recipe change. Batches hold at
    most ``batch_lines`` lines and ``batch_media`` media references (None: no media limit; both default to a
    run's), and the release is cut into at least ``min_batches`` when it has the lines (``batch_plan.py``):
    each of its N subsets into at least ``ceil(min_batches / N)``. With ``limit`` (a trial run) each
    subset's entry covers its first ``limit`` lines and counts the rest (``beyond_limit``).
    """
    options = dict(storage_options or {})
    fs, root = _open_release(release, options)
    names = wanted_subsets(fs, root, release, subsets)
    local = is_local(fs)

    def url(path: str) -> str:  # a path other processes can open: plain when local, else with its protocol
        return path if local else str(fs.unstrip_protocol(path))

    common = {
        "storage_options": options,
        "release": release,
        "revision": release_revision(release, fs, root),
    }
    recipes = recipe_fingerprints_of(names, recipe_dirs)
    # The split keeps every core busy to the end of a small run. Other subsets' batches do that as well as
    # a subset's own: 76 subsets each split for a 2-core window made ~300 batch tasks of a few rows each out
    # of 5,000 images (each a Prefect task run and three manifest parts), ~3 CPU-s a subset.
    plan = _Plan(batch_lines, batch_media, -(-min_batches // max(1, len(names))), dedup, limit)
    return [_subset_entry(fs, root, name, url, plan, recipes.get(name), common) for name in names]


@dataclass(frozen=True)
class _Plan:
    batch_lines: int
    batch_media: int | None
    min_batches: int
    dedup: bool
    limit: int | None = None


def _open_release(release: str, options: dict[str, Any]) -> tuple[AbstractFileSystem, str]:
    """The filesystem and root folder of ``release``; a ``ReleaseError`` that names no credential."""
    secrets = secret_values(options)  # never echoed: errors name the release, not its credentials
    try:
        fs, root = url_to_fs(release, **options)
    except (ImportError, ValueError, TypeError) as exc:
        raise ReleaseError(scrub(f"cannot open release {release!r}: {exc}", secrets)) from None
    try:
        is_dir = fs.isdir(root)
    except Exception as exc:  # noqa: BLE001 - any backend failure (bad option, auth, network) is a usage error
        raise ReleaseError(
            scrub(f"cannot read release {release!r}: {type(exc).__name__}: {exc}", secrets)
        ) from None
    if not is_dir:
        raise ReleaseError(f"release {release!r} is not a folder (expected one folder per subset)")
    return fs, root


def wanted_subsets(fs: AbstractFileSystem, root: str, release: str, subsets: Iterable[str]) -> list[str]:
    """The folders to catalog, by name compared in NFC; refused before any work when a wanted name breaks the
    subset name rule (publish could not write it) or two folders are one name in two Unicode spellings."""
    folders: dict[str, list[str]] = {}
    for name in list_subset_names(fs, root):
        folders.setdefault(normalise_subset_name(name), []).append(name)
    available = sorted(folders)
    wanted = sorted({normalise_subset_name(s) for s in subsets} or available)
    unknown = [w for w in wanted if w not in folders]
    if unknown:
        raise ReleaseError(
            f"subset(s) {', '.join(unknown)} not found in {release!r}; "
            f"available: {', '.join(available) or '(none: no <name>/<name>.jsonl found)'}"
        )
    problems = []
    for w in wanted:
        if len(folders[w]) > 1:
            spellings = " and ".join(ascii(f) for f in folders[w])
            problems.append(f"folders {spellings} are one subset name in two Unicode spellings: keep one")
        problem = subset_name_problem(w)
        if problem:
            problems.append(problem)
    if problems:
        raise ReleaseError(
            f"release {release!r}: "
            + "; ".join(problems)
            + " (or leave it out: pass --subset for the others)"
        )
    return [folders[w][0] for w in wanted]


def _subset_entry(
    fs: AbstractFileSystem,
    root: str,
    name: str,
    url: Callable[[str], str],
    plan: _Plan,
    recipe_sha256: str | None,
    common: dict[str, Any],
) -> SubsetEntry:
    folder = f"{root}/{name}"
    jsonl = f"{folder}/{name}.jsonl"
    readme_sha, license_id, license_text, sources = _readme_facts(fs, f"{folder}/README.md")
    scan = scan_subset_jsonl(
        fs,
        jsonl,
        plan.batch_lines,
        subset=name,
        dedup=plan.dedup,
        batch_media=plan.batch_media,
        min_batches=plan.min_batches,
        limit=plan.limit,
    )
    return SubsetEntry(
        subset=name,
        path=url(folder),
        jsonl=url(jsonl),
        readme_sha256=readme_sha,
        jsonl_sha256=scan.sha256,
        jsonl_bytes=scan.size,
        rows=scan.rows,
        license=license_id,
        license_text=license_text,
        media_tars=_media_tars(fs, folder, url),
        batch_offsets=scan.offsets,
        batch_first_lines=scan.first_lines,
        media_sources=sources,
        media_recipe_sha256=recipe_sha256,
        duplicate_rows=scan.duplicate_rows,
        id_conflicts=scan.id_conflicts,
        beyond_limit=scan.beyond_limit,
        **common,
    )


def _readme_facts(
    fs: AbstractFileSystem, readme_path: str
) -> tuple[str | None, str, str | None, tuple[str, ...]]:
    """(sha256, license id, license words, upstream media sources) of a subset's README, if it has one."""
    if not fs.exists(readme_path):
        return None, "unknown", None, ()
    raw = fs.cat_file(readme_path)
    text = raw.decode("utf-8", errors="replace")
    license_id, license_text = detect_license(text)
    return hashlib.sha256(raw).hexdigest(), license_id, license_text, find_media_sources(text)


def _media_tars(fs: AbstractFileSystem, folder: str, url: Callable[[str], str]) -> tuple[str, ...]:
    if not fs.isdir(f"{folder}/media"):
        return ()
    return tuple(sorted(url(p) for p in fs.glob(f"{folder}/media/shard_*.tar") if fs.isfile(p)))
