"""The JSONL scan: one streaming pass that hashes a subset's JSONL, counts its lines and plans its batches.

It plans the batches (``batch_plan.py``: where each starts, so parse batches can seek straight to their
bytes; sized by lines and media references, split further for a small subset) and, with ``dedup``, feeds
the duplicate search (``duplicates.py``), which no single batch could do. The pass keeps 16 bytes per line
(two 64-bit hashes; about 32 MB at peak per million lines while resolving) and re-reads the file once,
only when candidates were found, to confirm them exactly.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from ...schemas.sample_keys import sanitize_key
from .batch_plan import BatchPlanner
from .duplicates import hash64, line_id, resolve_duplicates

CHUNK = 8 * 1024 * 1024

#: The UTF-8 byte order mark some editors write at the start of a file.
UTF8_BOM = b"\xef\xbb\xbf"


def strip_bom(data: bytes, first_line: int) -> bytes:
    """``data`` without a UTF-8 BOM when it starts the file (``first_line`` 1); else ``data`` unchanged.

    Only the file's first bytes can hold one: a BOM anywhere else is content (and invalid JSON there).
    """
    return data[len(UTF8_BOM) :] if first_line == 1 and data.startswith(UTF8_BOM) else data


@dataclass(frozen=True)
class JsonlScan:
    sha256: str
    size: int
    rows: int
    offsets: tuple[int, ...]
    duplicate_rows: tuple[tuple[int, int], ...] = ()
    id_conflicts: tuple[tuple[int, int, str], ...] = ()
    first_lines: tuple[int, ...] = ()  # the first line (1-based) of each batch
    beyond_limit: int = 0  # lines after ``limit`` (``rows`` counts the lines taken, the plan covers them)


def iter_lines(
    fs: AbstractFileSystem, path: str, h: Any = None, size: list[int] | None = None
) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line without its newline, byte offset of its start) in one streaming pass.

    Memory stays bounded by the chunk size plus the longest line. ``h`` (a hashlib object) is fed every
    byte; ``size[0]`` ends as the number of bytes read. Line 1 is yielded without a leading UTF-8 BOM, as
    the parser reads it (its offset stays 0; the hash and the size count the BOM's bytes).
    """
    tail = b""
    tail_pos = 0
    read = 0
    line = 0
    with fs.open(path, "rb", block_size=CHUNK) as f:
        while chunk := f.read(CHUNK):
            if h is not None:
                h.update(chunk)
            read += len(chunk)
            data = tail + chunk if tail else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
                continue
            start = tail_pos
            for raw in data[:cut].split(b"\n"):
                line += 1
                yield line, strip_bom(raw, line), start
                start += len(raw) + 1
            tail, tail_pos = data[cut + 1 :], tail_pos + cut + 1
    if size is not None:
        size[0] = read
    if tail:
        yield line + 1, strip_bom(tail, line + 1), tail_pos


def scan_subset_jsonl(
    fs: AbstractFileSystem,
    path: str,
    batch_lines: int,
    *,
    subset: str | None = None,
    dedup: bool = True,
    batch_media: int | None,
    min_batches: int = 1,
    limit: int | None = None,
) -> JsonlScan:
    """Hash, count, plan batches and (with ``dedup`` and a ``subset`` name) find duplicates in one pass.

    Batches hold at most ``batch_lines`` lines and (unless None) ``batch_media`` media references (a line
    alone over it is a batch of its own), at least ``min_batches`` of them when the subset has the lines.
    A final line without a trailing newline counts as a line; a trailing newline does not start one.
    With ``limit``, the plan, ``rows`` and the duplicates cover the first ``limit`` lines only (the plan ends
    where line ``limit + 1`` starts) and ``beyond_limit`` counts the others; the hash is still the file's.
    """
    h = hashlib.sha256()
    planner = BatchPlanner(batch_lines, batch_media, min_batches)
    rows = 0
    row_h = array("q")
    key_h = array("q")
    total = [0]
    name = subset if dedup else None  # the subset to find duplicates in (None: no duplicate search)
    cut: int | None = None  # where the line after the limit starts
    for line, raw, start in iter_lines(fs, path, h, total):
        rows = line
        if limit is not None and line > limit:
            if cut is None:
                cut = start
            continue  # read for the hash and the count only
        planner.add(line, start, raw)
        if name is None:
            continue
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            row_h.append(0)
            key_h.append(0)
            continue
        row_h.append(hash64(raw))
        sid = line_id(raw)
        key_h.append(hash64(sanitize_key(name, sid)) if sid is not None else 0)
    size = total[0]
    taken = rows if limit is None else min(rows, limit)
    plan = planner.plan(size if cut is None else cut, taken)
    beyond = rows - taken
    if name is None:
        return JsonlScan(
            h.hexdigest(), size, taken, plan.offsets, first_lines=plan.first_lines, beyond_limit=beyond
        )
    duplicates, conflicts = resolve_duplicates(lambda: iter_lines(fs, path), name, row_h, key_h)
    duplicates = tuple(d for d in duplicates if d[0] <= taken)  # an earlier line is always a taken one
    conflicts = tuple(c for c in conflicts if c[0] <= taken)
    return JsonlScan(
        h.hexdigest(), size, taken, plan.offsets, duplicates, conflicts, plan.first_lines, beyond
    )


def scan_jsonl(fs: AbstractFileSystem, path: str, batch_lines: int) -> tuple[str, int, int, tuple[int, ...]]:
    """(sha256, size, lines, batch offsets) of a JSONL file in one streaming pass (no duplicate search)."""
    s = scan_subset_jsonl(fs, path, batch_lines, dedup=False, batch_media=None)
    return s.sha256, s.size, s.rows, s.offsets
