"""Parse stage: JSONL lines to normalised Records, or to Rejects that say which line and why.

Every line becomes exactly one Record or Reject, in order; nothing here raises on bad input. The modules
of this package each do one step:

* ``lines.py``: bytes to JSON values, the line-length cap, and the line-level reasons (``empty_line``,
  ``invalid_utf8``, ``invalid_json``, ``line_too_long``);
* ``forms/``: one module per record form (Nemotron ``messages``; LLaVA / Mantis / Llama-Nemotron-VLM v1
  ``conversations``), found through ``forms/registry.py``; ``record.py`` picks the form and builds the Record;
* ``parts.py``, ``placeholders.py``, ``refs.py``: content parts, ``<image>`` placeholders and media
  references, shared by the forms (``invalid_record``, ``unsupported_part``, ``placeholder_mismatch``,
  ``unsafe_ref``);
* ``dedup.py``: the catalog's duplicate rows and id conflicts applied to a batch (``duplicate_row``).

Reasons are a code, a colon and a readable detail, built through ``schemas/reasons.py``.
"""

from __future__ import annotations

import gc
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import orjson

from ...schemas.records import Record, Reject
from ..catalog import strip_bom
from .dedup import apply_dedup
from .forms.messages import fast_record
from .lines import MAX_LINE_BYTES, iter_line_chunks, split_lines, too_long, undecodable
from .record import record_or_reject
from .refs import NO_SCHEMES


def parse_line(
    raw: bytes,
    line: int,
    *,
    allowed_schemes: Collection[str] = NO_SCHEMES,
    subset: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Record | Reject:
    """One JSONL line to a Record or a Reject (never raises on bad input)."""
    raw = strip_bom(raw, line)
    if len(raw) > max_line_bytes:
        return too_long(raw, line, max_line_bytes, subset)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return undecodable(raw, line, exc, subset)
    return fast_record(obj, line) or record_or_reject(obj, line, allowed_schemes, subset)


def _parse_lines(
    lines: list[bytes],
    first_line: int,
    allowed_schemes: Collection[str],
    subset: str | None,
    max_line_bytes: int,
) -> list[Record | Reject]:
    # The hot loop of the stage: kept flat (no generator, no per-line helper call on the common path).
    loads, fast, decode_error = orjson.loads, fast_record, orjson.JSONDecodeError
    out: list[Record | Reject] = []
    append = out.append
    line = first_line
    for raw in lines:
        if len(raw) > max_line_bytes:
            append(too_long(raw, line, max_line_bytes, subset))
            line += 1
            continue
        try:
            obj = loads(raw)
        except decode_error as exc:
            append(undecodable(raw, line, exc, subset))
            line += 1
            continue
        append(fast(obj, line) or record_or_reject(obj, line, allowed_schemes, subset))
        line += 1
    return out


def parse_batch(
    data: bytes,
    first_line: int,
    *,
    allowed_schemes: Collection[str] = NO_SCHEMES,
    duplicates: Mapping[int, int] | None = None,
    conflicts: Mapping[int, tuple[int, str]] | None = None,
    subset: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[Record | Reject]:
    """Parse a chunk of whole JSONL lines whose first line has number ``first_line`` (1-based): every line
    becomes one Record or Reject, in order, in a list built with the cyclic GC paused (parsing creates no
    cycles).

    ``duplicates`` (line -> earlier identical line) and ``conflicts`` (line -> (earlier line with the same
    id, distinct key)) come from the catalog's scan (:meth:`SubsetEntry.duplicates_in` / ``conflicts_in``)
    and are applied by :func:`~vlmforge.tasks.parse.dedup.apply_dedup`.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        data = strip_bom(data, first_line)
        items = _parse_lines(split_lines(data), first_line, allowed_schemes, subset, max_line_bytes)
        apply_dedup(items, duplicates, conflicts, subset)
        return items
    finally:
        if was_enabled:
            gc.enable()


def iter_records(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    allowed_schemes: Collection[str] = NO_SCHEMES,
    subset: str | None = None,
    chunk_size: int = 8 * 1024 * 1024,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Record | Reject]:
    """Stream every line of a JSONL (local path or fsspec URL) as Records and Rejects, in bounded memory."""
    from ..storage import url_to_fs

    fs, path = url_to_fs(url, **dict(storage_options or {}))
    line = 1
    with fs.open(path, "rb", block_size=chunk_size) as f:
        for chunk in iter_line_chunks(f, chunk_size=chunk_size):
            items = parse_batch(
                chunk, line, allowed_schemes=allowed_schemes, subset=subset, max_line_bytes=max_line_bytes
            )
            line += len(items)
            yield from items
