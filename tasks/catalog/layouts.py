"""Source layouts besides the Nemotron one, staged as a Nemotron-layout release the pipeline runs unchanged.

Three public VLM SFT benchmark sets, read in their published layouts (a local folder or any fsspec URL such
as ``hf://datasets/TIGER-Lab/Mantis-Instruct``):

* ``mantis`` (TIGER-Lab/Mantis-Instruct): one folder per config (``nlvr2``, ``spot-the-diff``...) holding
  Parquet rows ``id``, ``images: [{bytes, path}]``, ``conversation: [{role, content}]`` (one ``<image>`` per
  image) and the images in ``train_images.zip`` / ``val_images.zip`` beside them. Only the members the rows
  reference are read, through the zip's central directory and ranged reads (``tasks/archives.py``).
* ``infovqa`` (Ahren09/InfoVQA): Parquet with the image bytes embedded in each row (``image: {bytes, path}``,
  ``question``, ``answer`` or ``answers``). One config per split (``train``, ``validation``, ``test``).
* ``llava_video`` (lmms-lab/LLaVA-Video-178K): one folder per duration/source category with LLaVA-style JSON
  (``id``, ``video``, ``conversations: [{from, value}]`` where ``<image>`` stands for the video) and the
  videos in ``*.tar.gz`` archives beside them. Each archive is streamed once; only referenced members are
  kept.

Staging turns each config into ``OUT/staging/<format>/<subset>/<subset>.jsonl`` (one line per source row, in
source order, in the LLaVA/Mantis form :func:`vlmforge.tasks.parse.records.parse_record` reads) plus the
README of the
source (license), and puts every media object it read (embedded bytes, zip members, tar members) into the
run's content store. A media reference the staging resolved is written as ``store/<sha256>/<name>``; the
batch reads it back from the store (:func:`read_store_ref`) and it goes through the same verify / resize /
token path as any other file. A reference staging could not find keeps its source path, so the batch
reports it as ``missing_media`` (after trying ``--media-root`` folders). A placeholder count that does not
match the media count is left for the parser, which rejects it (``placeholder_mismatch``). Every source row
becomes exactly one line, so rows in = ok + rejected + dropped holds against the source.

Staging is deterministic (same source bytes, same JSONL bytes) and skipped on a rerun when the source files
(names, sizes, and the etag / sha / mtime the filesystem reports) and the staged objects are unchanged, so a
rerun re-reads no archive and every batch stays current.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from fsspec import AbstractFileSystem

from ..errors import ReleaseError
from ..fetch.archives import (
    FsRangeSource,
    ZipEntry,
    ZipIndex,
    check_zip_entry,
    iter_tar,
    normalize_member,
    plan_ranges,
    read_zip_group,
    read_zip_index,
)
from ..fetch.http import FetchError
from ..storage import ContentStore, atomic_write_bytes, is_local, sha256_bytes, url_to_fs

__all__ = [
    "SOURCE_FORMATS",
    "STAGING_VERSION",
    "StageStats",
    "StagedRelease",
    "is_store_ref",
    "list_configs",
    "read_store_ref",
    "stage_source",
    "store_ref",
]

SOURCE_FORMATS: Final = ("mantis", "infovqa", "llava_video")
#: Bump when the staged JSONL of the same source changes (part of the staging stamp).
STAGING_VERSION: Final = "1"
#: Largest media object read from an archive or a row (a bigger one stays unresolved: ``missing_media``).
MAX_MEDIA_BYTES: Final = 4 * 1024 * 1024 * 1024
_STORE_REF = re.compile(r"^store/([0-9a-f]{64})/([A-Za-z0-9._-]{1,120})$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_READ_CHUNK = 8 * 1024 * 1024
_PARQUET_BATCH = 256  # rows per Arrow record batch (bounded memory with embedded images)


# ----------------------------------------------------------------------------------------------- refs


def _safe_name(path: str, fallback: str = "media") -> str:
    name = posixpath.basename(path.replace("\\", "/")) or fallback
    name = _SAFE_NAME.sub("_", name).strip("._") or fallback
    if len(name) > 120:
        stem, dot, ext = name.rpartition(".")
        name = (stem[: 119 - len(ext)] + "." + ext) if dot and len(ext) <= 10 else name[:120]
    return name


def store_ref(sha256: str, path: str) -> str:
    """The reference of a staged object: ``store/<sha256>/<file name of its source path>``."""
    return f"store/{sha256}/{_safe_name(path)}"


def is_store_ref(ref: str) -> bool:
    return _STORE_REF.match(ref) is not None


def read_store_ref(store: ContentStore, ref: str) -> bytes | None:
    """The bytes of a ``store/<sha256>/<name>`` reference (checked against its sha256), or None when the
    reference is not one or its object is not in ``store``."""
    m = _STORE_REF.match(ref)
    if m is None:
        return None
    sha = m.group(1)
    try:
        data = store.get(sha)
    except (FileNotFoundError, OSError):
        return None
    return data if sha256_bytes(data) == sha else None


def _image_ext(data: bytes) -> str:
    if data[:3] == b"\xff\xd8\xff":
        return "jpg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    return "bin"


# ------------------------------------------------------------------------------------------- results


@dataclass
class StageStats:
    """What staging did for one subset (recorded in the ``runs`` table as the ``staging`` stage)."""

    subset: str
    rows: int = 0
    media_refs: int = 0
    embedded: int = 0  # objects taken from bytes inside rows
    archive_members: int = 0  # objects read from zip / tar members
    unresolved: int = 0  # references staging could not find (the batch reports them missing)
    bytes_stored: int = 0
    archive_bytes_read: int = 0
    archives_streamed: int = 0
    seconds: float = 0.0
    skipped: bool = False  # the staged subset was current: nothing was read
    problems: list[str] = field(default_factory=list)  # archive errors, first few


@dataclass
class StagedRelease:
    root: str  # a Nemotron-layout release: <root>/<subset>/<subset>.jsonl + README.md
    format: str
    subsets: list[str]
    stats: list[StageStats]


@dataclass(frozen=True)
class _Config:
    """One config of a source: its subset name, the files its rows come from and its media archives."""

    name: str
    subset: str
    rows_files: tuple[str, ...]  # fs paths, in row order
    archives: tuple[str, ...]  # fs paths of zips (mantis) or tar.gz (llava_video)
    folder: str  # fs path of the config folder (loose media, README)


# --------------------------------------------------------------------------------------------- layout


def _ls(fs: AbstractFileSystem, path: str) -> list[dict[str, Any]]:
    try:
        return sorted(fs.ls(path, detail=True), key=lambda e: str(e["name"]))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _name(entry: dict[str, Any]) -> str:
    return str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]


def _files(fs: AbstractFileSystem, folder: str, *suffixes: str) -> list[str]:
    return [
        str(e["name"])
        for e in _ls(fs, folder)
        if e["type"] != "directory" and _name(e).lower().endswith(suffixes) and not _name(e).startswith(".")
    ]


def _dirs(fs: AbstractFileSystem, root: str) -> list[str]:
    return [
        str(e["name"]).rstrip("/")
        for e in _ls(fs, root)
        if e["type"] == "directory" and not _name(e).startswith((".", "_"))
    ]


def _split_of(path: str) -> str:
    """``train`` of ``train-00000-of-00001.parquet`` / ``train.parquet``."""
    stem = posixpath.basename(path).split(".", 1)[0]
    return re.split(r"[-_]\d", stem, maxsplit=1)[0] or "train"


def _configs(fs: AbstractFileSystem, root: str, fmt: str) -> list[_Config]:
    out: list[_Config] = []
    if fmt == "mantis":
        for folder in _dirs(fs, root):
            parquet = _files(fs, folder, ".parquet")
            if parquet:
                name = folder.rsplit("/", 1)[-1]
                zips = sorted(
                    _files(fs, folder, ".zip"), key=lambda p: (not p.endswith("train_images.zip"), p)
                )
                out.append(_Config(name, name, tuple(parquet), tuple(zips), folder))
    elif fmt == "infovqa":
        found = [(root, p) for p in _files(fs, root, ".parquet")]
        for folder in _dirs(fs, root):
            found += [(folder, p) for p in _files(fs, folder, ".parquet")]
            for sub in _dirs(fs, folder):  # <config>/<split>/*.parquet
                found += [(sub, p) for p in _files(fs, sub, ".parquet")]
        by_split: dict[str, list[tuple[str, str]]] = {}
        for folder, p in found:
            by_split.setdefault(_split_of(p), []).append((folder, p))
        for split, items in sorted(by_split.items()):
            out.append(_Config(split, f"infovqa_{split}", tuple(p for _, p in items), (), items[0][0]))
    elif fmt == "llava_video":
        for folder in _dirs(fs, root):
            rows = _files(fs, folder, ".json", ".jsonl")
            if rows:
                name = folder.rsplit("/", 1)[-1]
                tars = _files(fs, folder, ".tar.gz", ".tgz", ".tar")
                out.append(_Config(name, name, tuple(rows), tuple(tars), folder))
    else:
        raise ReleaseError(f"unknown source format {fmt!r}; expected one of {', '.join(SOURCE_FORMATS)}")
    return out


def list_configs(release: str, fmt: str, storage_options: dict[str, Any] | None = None) -> list[str]:
    """Config names of a source in layout ``fmt`` (what ``--config`` selects)."""
    fs, root = url_to_fs(release, **dict(storage_options or {}))
    return [c.name for c in _configs(fs, root, fmt)]


# ---------------------------------------------------------------------------------------------- rows


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy: bytes become a short marker (they are never written into the staged line)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)


def _parquet_rows(fs: AbstractFileSystem, path: str, columns: Iterable[str]) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with fs.open(path, "rb") as f:
        pf = pq.ParquetFile(f)
        names = set(pf.schema_arrow.names)
        wanted = [c for c in columns if c in names]
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH, columns=wanted or None):
            yield from batch.to_pylist()


def _json_rows(fs: AbstractFileSystem, path: str) -> Iterator[Any]:
    raw = fs.cat_file(path)
    if path.lower().endswith(".jsonl"):
        for line in raw.splitlines():
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    yield {"vlmforge_error": f"invalid JSON in {posixpath.basename(path)}: {exc}"}
        return
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ReleaseError(f"{path}: not valid JSON: {exc}") from None
    if isinstance(doc, dict):
        doc = next((v for v in doc.values() if isinstance(v, list)), [doc])
    if not isinstance(doc, list):
        raise ReleaseError(f"{path}: expected a JSON list of records")
    yield from doc


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode() + b"\n"


# ------------------------------------------------------------------------------------- media readers


class _Stager:
    """Puts media into the store and remembers their references (one per config)."""

    def __init__(self, store: ContentStore, stats: StageStats) -> None:
        self.store, self.stats = store, stats
        self.objects: set[str] = set()

    def put(self, data: bytes, path: str, *, embedded: bool) -> str:
        sha = sha256_bytes(data)
        if sha not in self.objects:
            if not self.store.has(sha):
                self.store.put(data, sha)
                self.stats.bytes_stored += len(data)
            self.objects.add(sha)
        if embedded:
            self.stats.embedded += 1
        else:
            self.stats.archive_members += 1
        return store_ref(sha, path)

    def problem(self, text: str) -> None:
        if len(self.stats.problems) < 20:
            self.stats.problems.append(text[:300])


def _candidates(path: str, config: str, archive_stem: str) -> list[str]:
    """Member names a row's image path may have in the archive (as written, without / with the config or
    archive folder in front)."""
    p = normalize_member(path)
    out = [p]
    for prefix in (config, archive_stem, "train_images", "val_images", "images", "videos"):
        if p.startswith(prefix + "/"):
            out.append(p[len(prefix) + 1 :])
        else:
            out.append(f"{prefix}/{p}")
    return list(dict.fromkeys(out))


class _ZipMembers:
    """The zips of a Mantis config: central directories read once, members read by coalesced ranges."""

    def __init__(self, fs: AbstractFileSystem, paths: tuple[str, ...], config: str, stager: _Stager) -> None:
        self.stager = stager
        self.config = config
        self.zips: list[tuple[str, FsRangeSource, ZipIndex, dict[str, list[str]]]] = []
        for path in paths:
            label = posixpath.basename(path)
            source = FsRangeSource(fs, path, label=label)
            try:
                index = read_zip_index(source)
            except (FetchError, OSError) as exc:
                stager.problem(f"{label}: {exc}")
                continue
            by_base: dict[str, list[str]] = {}
            for name in index.entries:
                by_base.setdefault(posixpath.basename(name), []).append(name)
            self.zips.append((label, source, index, by_base))
        self.resolved: dict[str, str | None] = {}

    def _find(self, path: str) -> tuple[int, ZipEntry] | None:
        for i, (label, _, index, by_base) in enumerate(self.zips):
            stem = label.rsplit(".", 1)[0]
            for cand in _candidates(path, self.config, stem):
                entry = index.entries.get(cand)
                if entry is not None and not entry.is_dir:
                    return i, entry
            same = by_base.get(posixpath.basename(normalize_member(path)), [])
            if len(same) == 1:  # a unique file name: the folder inside the zip differs from the row's
                return i, index.entries[same[0]]
        return None

    def resolve(self, paths: Iterable[str]) -> None:
        """Read the members of ``paths`` not resolved yet (neighbours in one ranged read)."""
        todo: dict[int, dict[int, tuple[ZipEntry, list[str]]]] = {}
        for path in dict.fromkeys(paths):
            if path in self.resolved:
                continue
            hit = self._find(path)
            if hit is None:
                self.resolved[path] = None
                continue
            i, entry = hit
            bad = check_zip_entry(entry, entry.name, MAX_MEDIA_BYTES, self.zips[i][0])
            if bad is not None:
                self.stager.problem(str(bad))
                self.resolved[path] = None
                continue
            todo.setdefault(i, {}).setdefault(entry.header_offset, (entry, []))[1].append(path)
        for i, entries in todo.items():
            label, source, index, _ = self.zips[i]
            before = source.bytes_read
            for group in plan_ranges([e for e, _ in entries.values()]):
                try:
                    results = list(read_zip_group(source, index, group))
                except (FetchError, OSError) as exc:
                    results = [(e, FetchError("bad_archive", str(exc), url=label)) for e in group]
                for entry, data in results:
                    for path in entries[entry.header_offset][1]:
                        if isinstance(data, bytes):
                            self.resolved[path] = self.stager.put(data, path, embedded=False)
                        else:
                            self.stager.problem(f"{label}: {data}")
                            self.resolved[path] = None
            self.stager.stats.archive_bytes_read += source.bytes_read - before


def _tar_members(
    fs: AbstractFileSystem, tars: tuple[str, ...], wanted: set[str], config: str, stager: _Stager
) -> dict[str, str]:
    """Stream each tar once and store the members ``wanted`` names (by path, folder-tolerant); returns
    path -> store reference. A tar is not opened once every wanted path is found."""
    found: dict[str, str] = {}
    by_member: dict[str, list[str]] = {}
    for path in wanted:
        for cand in _candidates(path, config, ""):
            by_member.setdefault(cand, []).append(path)
    for tar in tars:
        if len(found) == len(wanted):
            break
        label = posixpath.basename(tar)
        stager.stats.archives_streamed += 1
        try:
            with fs.open(tar, "rb", block_size=_READ_CHUNK) as raw:
                names = {m for m, paths in by_member.items() if any(p not in found for p in paths)}
                for tm in iter_tar(raw, names, max_bytes=MAX_MEDIA_BYTES, label=label):
                    if tm.error is not None or tm.fileobj is None:
                        stager.problem(str(tm.error))
                        continue
                    chunks = []
                    while chunk := tm.fileobj.read(_READ_CHUNK):
                        chunks.append(chunk)
                    data = b"".join(chunks)
                    for path in by_member.get(tm.name, []):
                        if path not in found:
                            found[path] = stager.put(data, path, embedded=False)
                    if len(found) == len(wanted):
                        break
                stager.stats.archive_bytes_read += int(getattr(raw, "loc", 0) or raw.tell())
        except (FetchError, OSError) as exc:
            stager.problem(f"{label}: {exc}")
    return found


# ------------------------------------------------------------------------------------------ formats


def _mantis_lines(fs: AbstractFileSystem, cfg: _Config, stager: _Stager) -> Iterator[bytes]:
    zips = _ZipMembers(fs, cfg.archives, cfg.name, stager)
    for path in cfg.rows_files:
        rows = list(_parquet_rows(fs, path, ("id", "images", "conversation", "conversations")))
        stager.stats.rows += len(rows)
        # The zip members of this file's rows, in one pass of coalesced ranged reads.
        zips.resolve(
            img["path"]
            for row in rows
            if isinstance(row.get("images"), list)
            for img in row["images"]
            if isinstance(img, dict) and img.get("bytes") is None and isinstance(img.get("path"), str)
        )
        for row in rows:
            images = row.get("images")
            refs: Any = images
            if isinstance(images, list):
                refs = []
                for k, img in enumerate(images):
                    stager.stats.media_refs += 1
                    refs.append(_mantis_image(img, row, k, zips, stager))
            rec = {k: _jsonable(v) for k, v in row.items() if k != "images"}
            rec["images"] = _jsonable(refs)
            yield _line(rec)


def _mantis_image(img: Any, row: dict[str, Any], k: int, zips: _ZipMembers, stager: _Stager) -> Any:
    if isinstance(img, str):
        img = {"path": img, "bytes": None}
    if not isinstance(img, dict):
        return _jsonable(img)  # the parser rejects it with the field named
    data, path = img.get("bytes"), img.get("path")
    if isinstance(data, bytes) and data:
        name = path if isinstance(path, str) and path else f"{row.get('id', 'row')}_{k}.{_image_ext(data)}"
        return stager.put(data, name, embedded=True)
    if isinstance(path, str) and path:
        ref = zips.resolved.get(path)
        if ref is None:
            stager.stats.unresolved += 1
            return path
        return ref
    return _jsonable(img)


def _answer(row: dict[str, Any]) -> Any:
    for key in ("answer", "answers", "label"):
        if key in row and row[key] is not None:
            value = row[key]
            if isinstance(value, list):
                return str(value[0]) if value else ""
            return value if isinstance(value, str) else str(value)
    return None


def _infovqa_lines(fs: AbstractFileSystem, cfg: _Config, stager: _Stager) -> Iterator[bytes]:
    cols = ("id", "questionId", "question_id", "image", "question", "answer", "answers", "image_url")
    for path in cfg.rows_files:
        stem = posixpath.basename(path).split(".", 1)[0]
        for i, row in enumerate(_parquet_rows(fs, path, cols)):
            stager.stats.rows += 1
            sid = next((row[k] for k in ("id", "questionId", "question_id") if row.get(k) is not None), None)
            sid = str(sid) if sid is not None else f"{stem}-{i:07d}"
            image = row.get("image")
            data = image.get("bytes") if isinstance(image, dict) else image
            images: list[str] = []
            if isinstance(data, bytes) and data:
                stager.stats.media_refs += 1
                name = image.get("path") if isinstance(image, dict) else None
                images.append(stager.put(data, name or f"{sid}.{_image_ext(data)}", embedded=True))
            question = row.get("question")
            rec = {
                "id": sid,
                "images": images,
                "conversations": [
                    {"from": "human", "value": f"<image>\n{question}" if isinstance(question, str) else None},
                    {"from": "gpt", "value": _answer(row)},
                ],
            }
            yield _line(rec)


def _llava_video_lines(fs: AbstractFileSystem, cfg: _Config, stager: _Stager) -> Iterator[bytes]:
    rows = [r for path in cfg.rows_files for r in _json_rows(fs, path)]
    stager.stats.rows = len(rows)
    refs = {
        r["video"] for r in rows if isinstance(r, dict) and isinstance(r.get("video"), str) and r["video"]
    }
    # Loose files beside the JSON (an unpacked copy) are taken first; the rest come from the archives.
    found: dict[str, str] = {}
    for ref in sorted(refs):
        loose = posixpath.normpath(f"{cfg.folder}/{normalize_member(ref)}")
        if loose.startswith(cfg.folder + "/") and ".." not in ref.split("/") and _isfile(fs, loose):
            found[ref] = stager.put(fs.cat_file(loose), ref, embedded=False)
    found |= _tar_members(fs, cfg.archives, refs - set(found), cfg.name, stager)
    for row in rows:
        if not isinstance(row, dict):
            yield _line({"vlmforge_error": _jsonable(row)})
            continue
        rec = {k: _jsonable(v) for k, v in row.items()}
        video = row.get("video")
        if isinstance(video, str) and video:
            stager.stats.media_refs += 1
            if video in found:
                rec["video"] = found[video]
            else:
                stager.stats.unresolved += 1
            if "image" not in row and "images" not in row:  # "<image>" stands for the video
                for key in ("conversations", "conversation"):
                    turns = rec.get(key)
                    if isinstance(turns, list):
                        for t in turns:
                            if isinstance(t, dict) and isinstance(t.get("value"), str):
                                t["value"] = t["value"].replace("<image>", "<video>")
        yield _line(rec)


def _isfile(fs: AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except (OSError, ValueError):
        return False


_WRITERS = {"mantis": _mantis_lines, "infovqa": _infovqa_lines, "llava_video": _llava_video_lines}


# ------------------------------------------------------------------------------------------- staging


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


def _readme(fs: AbstractFileSystem, root: str, cfg: _Config, fmt: str, release: str) -> bytes:
    for path in (f"{cfg.folder}/README.md", f"{root}/README.md"):
        if _isfile(fs, path):
            data: bytes = fs.cat_file(path)
            return data
    return f"# {cfg.subset}\n\nStaged by vlmforge from {release} ({fmt} layout); no README found.\n".encode()


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
    if fmt not in SOURCE_FORMATS:
        raise ReleaseError(f"unknown source format {fmt!r}; expected one of {', '.join(SOURCE_FORMATS)}")
    try:
        fs, root = url_to_fs(release, **dict(storage_options or {}))
        is_dir = fs.isdir(root)
    except (ImportError, ValueError, TypeError, OSError) as exc:
        raise ReleaseError(f"cannot open release {release!r}: {type(exc).__name__}: {exc}") from None
    if not is_dir:
        raise ReleaseError(f"release {release!r} is not a folder (expected the {fmt} layout)")
    available = _configs(fs, root, fmt)
    names = [c.name for c in available]
    wanted = list(dict.fromkeys(configs)) or names
    unknown = [c for c in wanted if c not in names]
    if unknown:
        raise ReleaseError(
            f"config(s) {', '.join(unknown)} not found in {release!r} ({fmt} layout); "
            f"available: {', '.join(names) or '(none)'}"
        )
    out_fs, out_root = url_to_fs(out)
    staged_root = f"{out_root}/staging/{fmt}"
    content = ContentStore(store)
    stats: list[StageStats] = []
    for cfg in (c for c in available if c.name in wanted):
        stats.append(_stage_config(fs, root, cfg, fmt, release, out_fs, staged_root, content))
    root_url = staged_root if is_local(out_fs) else str(out_fs.unstrip_protocol(staged_root))
    return StagedRelease(root_url, fmt, [s.subset for s in stats], stats)


def _stage_config(
    fs: AbstractFileSystem,
    root: str,
    cfg: _Config,
    fmt: str,
    release: str,
    out_fs: AbstractFileSystem,
    staged_root: str,
    store: ContentStore,
) -> StageStats:
    t0 = time.perf_counter()
    folder = f"{staged_root}/{cfg.subset}"
    jsonl, stamp_path = f"{folder}/{cfg.subset}.jsonl", f"{folder}/.vlmforge-staging.json"
    signature = {
        "staging_version": STAGING_VERSION,
        "format": fmt,
        "config": cfg.name,
        "rows": _signature(fs, cfg.rows_files),
        "archives": _signature(fs, cfg.archives),
    }
    previous = _read_json(out_fs, stamp_path)
    if (
        previous is not None
        and previous.get("signature") == signature
        and out_fs.exists(jsonl)
        and all(store.has(s) for s in previous.get("objects", []))
    ):
        st = StageStats(
            **{k: v for k, v in previous.get("stats", {}).items() if k in StageStats.__annotations__}
        )
        st.skipped, st.seconds, st.bytes_stored, st.archive_bytes_read, st.archives_streamed = (
            True,
            0.0,
            0,
            0,
            0,
        )
        st.seconds = time.perf_counter() - t0
        return st
    st = StageStats(subset=cfg.subset)
    stager = _Stager(store, st)
    h = hashlib.sha256()
    chunks: list[bytes] = []
    for line in _WRITERS[fmt](fs, cfg, stager):
        h.update(line)
        chunks.append(line)
    atomic_write_bytes(out_fs, f"{folder}/README.md", _readme(fs, root, cfg, fmt, release))
    atomic_write_bytes(out_fs, jsonl, b"".join(chunks))
    st.seconds = time.perf_counter() - t0
    record = {
        "signature": signature,
        "jsonl_sha256": h.hexdigest(),
        "release": release,
        "objects": sorted(stager.objects),
        "stats": asdict(st) | {"skipped": False},
        "rows_files": [posixpath.basename(p) for p in cfg.rows_files],
    }
    atomic_write_bytes(out_fs, stamp_path, json.dumps(record, sort_keys=True, indent=1).encode())
    return st


def _read_json(fs: AbstractFileSystem, path: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(fs.cat_file(path))
    except (FileNotFoundError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
