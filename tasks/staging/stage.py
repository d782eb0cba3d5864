"""Staging: a release in a public benchmark layout becomes a Nemotron-layout release the pipeline runs
unchanged.

Each config of the source (a local folder or any fsspec URL such as
``hf://datasets/TIGER-Lab/Mantis-Instruct``) becomes ``OUT/staging/<format>/<subset>/<subset>.jsonl`` (one
line per source row, in source order, in the LLaVA/Mantis form the parser's ``conversations`` form reads)
plus the README of the source (license), and every media object staging read (embedded bytes, zip members,
tar members) goes into the run's content store, referenced as ``store/<sha256>/<name>``
(``store_refs.py``). A reference staging could not find keeps its source path, so the batch reports it as
``missing_media`` (after trying ``--media-root`` folders). A placeholder count that does not match the media
count is left for the parser, which rejects it (``placeholder_mismatch``). Every source row becomes exactly
one line, so rows in = ok + rejected + dropped holds against the source.

Staging is deterministic (same source bytes, same JSONL bytes) and skipped on a rerun when the source files
(names, sizes, and the etag / sha / mtime the filesystem reports) and the staged objects are unchanged, so a
rerun re-reads no archive and every batch stays current. What a layout reads is in its own module
(``registry.py`` lists them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Final

from fsspec import AbstractFileSystem

from ...schemas.config import SourceOptions
from ...schemas.records import SubsetEntry
from ..catalog import release_revision
from ..errors import ReleaseError
from ..storage import ContentStore, atomic_write_bytes, is_local, url_to_fs
from .common import LayoutConfig, Stager, StageStats, isfile
from .layouts import SourceLayout, layout_for

#: Bump when the staged JSONL of the same source changes (part of the staging stamp).
STAGING_VERSION: Final = "1"
_STAMP = ".vlmforge-staging.json"


@dataclass
class StagedRelease:
    root: str  # a Nemotron-layout release: <root>/<subset>/<subset>.jsonl + README.md
    format: str
    subsets: list[str]
    stats: list[StageStats]


def list_configs(release: str, fmt: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Config names of a source in layout ``fmt`` (what ``--config`` selects)."""
    fs, root = url_to_fs(release, **dict(storage_options or {}))
    return [c.name for c in layout_for(fmt).configs(fs, root)]


def stage_source(
    release: str,
    fmt: str,
    out: str,
    store: str,
    *,
    configs: Iterable[str] = (),
    storage_options: dict[str, Any] | None = None,
) -> StagedRelease:
    """Stage the configs of ``release`` (layout ``fmt``; every config when ``configs`` is empty) under
    ``<out>/staging/<fmt>/`` as a Nemotron-layout release, media into ``store``."""
    layout = layout_for(fmt)
    fs, root = _open_source(release, fmt, storage_options)
    chosen = _wanted_configs(layout.configs(fs, root), configs, release, fmt)
    out_fs, out_root = url_to_fs(out)
    staged_root = f"{out_root}/staging/{fmt}"
    content = ContentStore(store)
    target = _Target(out_fs, staged_root, content)
    stats = [_stage_config(fs, root, cfg, layout, release, target) for cfg in chosen]
    root_url = staged_root if is_local(out_fs) else str(out_fs.unstrip_protocol(staged_root))
    return StagedRelease(root_url, fmt, [s.subset for s in stats], stats)


def _open_source(
    release: str, fmt: str, storage_options: dict[str, Any] | None
) -> tuple[AbstractFileSystem, str]:
    try:
        fs, root = url_to_fs(release, **dict(storage_options or {}))
        is_dir = fs.isdir(root)
    except (ImportError, ValueError, TypeError, OSError) as exc:
        raise ReleaseError(f"cannot open release {release!r}: {type(exc).__name__}: {exc}") from None
    if not is_dir:
        raise ReleaseError(f"release {release!r} is not a folder (expected the {fmt} layout)")
    return fs, root


def _wanted_configs(
    available: list[LayoutConfig], configs: Iterable[str], release: str, fmt: str
) -> list[LayoutConfig]:
    names = [c.name for c in available]
    wanted = list(dict.fromkeys(configs)) or names
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise ReleaseError(
            f"config(s) {', '.join(unknown)} not found in {release!r} ({fmt} layout); "
            f"available: {', '.join(names) or '(none)'}"
        )
    return [c for c in available if c.name in wanted]


@dataclass(frozen=True)
class _Target:
    """Where staged subsets go: the staging folder and the run's content store."""

    fs: AbstractFileSystem
    root: str
    store: ContentStore


def _stage_config(
    fs: AbstractFileSystem, root: str, cfg: LayoutConfig, layout: SourceLayout, release: str, target: _Target
) -> StageStats:
    t0 = time.perf_counter()
    folder = f"{target.root}/{cfg.subset}"
    jsonl, stamp_path = f"{folder}/{cfg.subset}.jsonl", f"{folder}/{_STAMP}"
    signature = {
        "staging_version": STAGING_VERSION,
        "format": layout.name,
        "config": cfg.name,
        "rows": _signature(fs, cfg.rows_files),
        "archives": _signature(fs, cfg.archives),
    }
    current = _current_stats(target, stamp_path, jsonl, signature)
    if current is not None:
        current.seconds = time.perf_counter() - t0
        return current
    st = StageStats(subset=cfg.subset)
    stager = Stager(target.store, st)
    h = hashlib.sha256()
    chunks: list[bytes] = []
    for line in layout.lines(fs, cfg, stager):
        h.update(line)
        chunks.append(line)
    atomic_write_bytes(target.fs, f"{folder}/README.md", _readme(fs, root, cfg, layout.name, release))
    atomic_write_bytes(target.fs, jsonl, b"".join(chunks))
    st.seconds = time.perf_counter() - t0
    stamp = {
        "signature": signature,
        "jsonl_sha256": h.hexdigest(),
        "release": release,
        "objects": sorted(stager.objects),
        "stats": asdict(st) | {"skipped": False},
        "rows_files": [posixpath.basename(p) for p in cfg.rows_files],
    }
    atomic_write_bytes(target.fs, stamp_path, json.dumps(stamp, sort_keys=True, indent=1).encode())
    return st


def _current_stats(
    target: _Target, stamp_path: str, jsonl: str, signature: dict[str, Any]
) -> StageStats | None:
    """The recorded stats (marked skipped, nothing read) when the staged subset is current, else None."""
    previous = _read_json(target.fs, stamp_path)
    if (
        previous is None
        or previous.get("signature") != signature
        or not target.fs.exists(jsonl)
        or not all(target.store.has(s) for s in previous.get("objects", []))
    ):
        return None
    st = StageStats(**{k: v for k, v in previous.get("stats", {}).items() if k in StageStats.__annotations__})
    st.skipped, st.bytes_stored, st.archive_bytes_read, st.archives_streamed = True, 0, 0, 0
    return st


def _signature(fs: AbstractFileSystem, paths: Iterable[str]) -> list[list[Any]]:
    """(name, size, version) of each source file; version is what the filesystem reports (etag, sha,
    mtime...), so a changed file restages its subset."""
    out: list[list[Any]] = []
    for p in paths:
        info = fs.info(p)
        version = next(
            (
                str(info[k])
                for k in ("sha256", "etag", "ETag", "blob_id", "mtime", "last_modified", "LastModified")
                if info.get(k) is not None
            ),
            None,
        )
        if version is None and isinstance(info.get("lfs"), dict):
            version = str(info["lfs"].get("sha256"))
        out.append([posixpath.basename(p), int(info.get("size") or 0), version])
    return out


def _readme(fs: AbstractFileSystem, root: str, cfg: LayoutConfig, fmt: str, release: str) -> bytes:
    for path in (f"{cfg.folder}/README.md", f"{root}/README.md"):
        if isfile(fs, path):
            data: bytes = fs.cat_file(path)
            return data
    return f"# {cfg.subset}\n\nStaged by vlmforge from {release} ({fmt} layout); no README found.\n".encode()


def _read_json(fs: AbstractFileSystem, path: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(fs.cat_file(path))
    except (FileNotFoundError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


# --- the run's source -----------------------------------------------------------------------------


def stage_run_source(
    source: SourceOptions, out: str, store: str
) -> tuple[SourceOptions, StagedRelease | None]:
    """With ``--format`` other than nemotron: stage the source as a Nemotron-layout release under
    ``OUT/staging/<format>/`` (media into the store at ``store``) and return the source options the rest of
    the run reads (the staged release, every staged subset unless some were named)."""
    if source.source_format == "nemotron":
        if source.source_configs:
            raise ReleaseError("--config selects configs of a staged source: give --format too")
        return source, None
    staged = stage_source(
        source.release,
        source.source_format,
        out,
        store,
        configs=source.source_configs,
        storage_options=source.storage_options,
    )
    unknown = sorted(set(source.subsets) - set(staged.subsets))
    if unknown:
        raise ReleaseError(
            f"subset(s) {', '.join(unknown)} not staged from {source.release!r}; "
            f"staged: {', '.join(staged.subsets)}"
        )
    work = source.model_dump() | {
        "release": staged.root,
        "storage_options": {},
        "subsets": source.subsets or tuple(staged.subsets),
    }
    return SourceOptions.model_validate(work), staged


def as_released(entries: list[SubsetEntry], release: str) -> list[SubsetEntry]:
    """Entries of a staged release name the source as given (release, revision), not the staging folder."""
    revision = release_revision(release)
    return [dataclasses.replace(e, release=release, revision=revision or e.revision) for e in entries]
