"""What every source layout shares: its configs, the folder listing, row readers, and the Stager that puts
media into the content store.

A layout module (``mantis.py``, ``infovqa.py``, ``llava_video.py``) only says where a config's rows and
media are and how one source row becomes one staged JSONL line; the helpers here do the rest the same way
for all of them.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from fsspec import AbstractFileSystem

from ...schemas.records import STAGED_ERROR
from ..archives import normalize_member
from ..errors import ReleaseError
from ..media import image_magic
from ..storage import ContentStore, sha256_bytes
from .store_refs import store_ref

#: Largest media object read from an archive or a row (a bigger one stays unresolved: ``missing_media``).
MAX_MEDIA_BYTES: Final = 4 * 1024 * 1024 * 1024
READ_CHUNK: Final = 8 * 1024 * 1024
_PARQUET_BATCH = 256  # rows per Arrow record batch (bounded memory with embedded images)
# Names given to embedded images by their format (others are staged as ``.bin``).
_EXTENSIONS = {"jpeg": "jpg", "png": "png", "webp": "webp", "gif": "gif"}


@dataclass(frozen=True)
class LayoutConfig:
    """One config of a source: its subset name, the files its rows come from and its media archives."""

    name: str
    subset: str
    rows_files: tuple[str, ...]  # fs paths, in row order
    archives: tuple[str, ...]  # fs paths of zips (mantis) or tar.gz (llava_video)
    folder: str  # fs path of the config folder (loose media, README)


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


class Stager:
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


# ------------------------------------------------------------------------------------------ listing


def _ls(fs: AbstractFileSystem, path: str) -> list[dict[str, Any]]:
    try:
        return sorted(fs.ls(path, detail=True), key=lambda e: str(e["name"]))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _name(entry: dict[str, Any]) -> str:
    return str(entry["name"]).rstrip("/").rsplit("/", 1)[-1]


def files(fs: AbstractFileSystem, folder: str, *suffixes: str) -> list[str]:
    """Visible files of ``folder`` whose names end with one of ``suffixes`` (any case), sorted."""
    return [
        str(e["name"])
        for e in _ls(fs, folder)
        if e["type"] != "directory" and _name(e).lower().endswith(suffixes) and not _name(e).startswith(".")
    ]


def dirs(fs: AbstractFileSystem, root: str) -> list[str]:
    """Sub-folders of ``root`` not starting with ``.`` or ``_``, sorted."""
    return [
        str(e["name"]).rstrip("/")
        for e in _ls(fs, root)
        if e["type"] == "directory" and not _name(e).startswith((".", "_"))
    ]


def isfile(fs: AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------------------------- rows


class UnreadableRows(ReleaseError):
    """A rows file of a source that cannot be read (a ``.parquet`` that is not Parquet, cut short...)."""


def parquet_rows(fs: AbstractFileSystem, path: str, columns: Iterable[str]) -> Iterator[dict[str, Any]]:
    """The rows of a Parquet file (only ``columns`` it has), a bounded batch at a time. A file Arrow cannot
    read raises :class:`UnreadableRows` with one line naming it (rows already yielded stand)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = posixpath.basename(path)
    try:
        with fs.open(path, "rb") as f:
            pf = pq.ParquetFile(f)
            names = set(pf.schema_arrow.names)
            wanted = [c for c in columns if c in names]
            for batch in pf.iter_batches(batch_size=_PARQUET_BATCH, columns=wanted or None):
                yield from batch.to_pylist()
    except (pa.ArrowException, OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
        detail = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise UnreadableRows(f"{name}: not a readable Parquet file ({detail})") from None


def unreadable_line(path: str, problem: str, stager: Stager) -> bytes:
    """The one staged line that stands for a rows file staging could not read: the parser rejects it as
    ``unreadable_source`` naming the file (its rows are unknown), and the staging stats keep the problem."""
    stager.problem(problem)
    stager.stats.rows += 1
    return staged_line({"id": f"unreadable:{posixpath.basename(path)}", STAGED_ERROR: problem})


def json_rows(fs: AbstractFileSystem, path: str) -> Iterator[Any]:
    """The records of a JSON list (or the first list of a JSON object) or of a JSONL file."""
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


def jsonable(value: Any) -> Any:
    """A JSON-safe copy: bytes become a short marker (they are never written into the staged line)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value)} bytes>"
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)


def staged_line(record: dict[str, Any]) -> bytes:
    """One staged JSONL line: canonical JSON (sorted keys, no spaces), so staging is deterministic."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode() + b"\n"


# -------------------------------------------------------------------------------------------- media


def image_ext(data: bytes) -> str:
    """The file extension of an image's bytes (``bin`` when the format is not one of the common four)."""
    return _EXTENSIONS.get(image_magic(data) or "", "bin")


def member_candidates(path: str, config: str, archive_stem: str) -> list[str]:
    """Member names a row's media path may have in an archive (as written, without / with the config or
    archive folder in front)."""
    p = normalize_member(path)
    out = [p]
    for prefix in (config, archive_stem, "train_images", "val_images", "images", "videos"):
        if p.startswith(prefix + "/"):
            out.append(p[len(prefix) + 1 :])
        else:
            out.append(f"{prefix}/{p}")
    return list(dict.fromkeys(out))
