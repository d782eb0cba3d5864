"""Bytes to JSON values, one JSONL line at a time, with the caps that keep a hostile line cheap.

A line over ``max_line_bytes`` is refused before it is decoded (``line_too_long``), so one hostile line
costs no more memory than its own bytes. A line orjson refuses gets the stdlib decoder's words (they name
the column): ``empty_line``, ``invalid_utf8: byte N: ...``, ``invalid_json: <msg> (col N)``. Files are read
in whole-line chunks whose memory is bounded by the chunk size plus the longest line. A UTF-8 byte order
mark at the very start of the file is not part of line 1 (the catalog's rule: :func:`strip_bom`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

from ...schemas.reasons import reason
from ...schemas.records import Reject

#: Lines longer than this are rejected undecoded (``line_too_long``); 16 MiB is ~4M tokens of text.
MAX_LINE_BYTES = 16 * 1024 * 1024


def split_lines(data: bytes) -> list[bytes]:
    """Lines of a JSONL chunk; a trailing newline does not start another line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def iter_line_chunks(f: Any, *, chunk_size: int = 8 * 1024 * 1024, end: int | None = None) -> Iterator[bytes]:
    """Whole-line chunks of an open binary file (from its current position to ``end`` or EOF).

    Memory stays bounded by ``chunk_size`` plus the longest line, whatever the file size.
    """
    pos = f.tell() if end is not None else 0
    tail = b""
    while True:
        want = chunk_size if end is None else min(chunk_size, end - pos)
        if want <= 0:
            break
        block = f.read(want)
        if not block:
            break
        pos += len(block)
        cut = block.rfind(b"\n")
        if cut < 0:
            tail += block
            continue
        yield tail + block[: cut + 1]
        tail = block[cut + 1 :]
    if tail:
        yield tail


def too_long(raw: bytes, line: int, cap: int, subset: str | None) -> Reject:
    """The reject of a line over the cap (its bytes are never decoded)."""
    return Reject(line, reason("line_too_long", f"{len(raw)} bytes > {cap} (not decoded)"), None, subset)


def undecodable(raw: bytes, line: int, exc: orjson.JSONDecodeError, subset: str | None) -> Reject:
    """The reject of a line orjson refused: blank, not UTF-8, or not one JSON value."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return Reject(line, reason("empty_line", "the line is blank"), None, subset)
    return Reject(line, _decode_failure(raw, exc), None, subset)


def _reject_nan(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def _decode_failure(raw: bytes, fast_error: orjson.JSONDecodeError) -> str:
    """The reason for a line orjson refused, in the stdlib decoder's words (they name the column)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return reason("invalid_utf8", f"byte {exc.start}: {exc.reason}")
    try:
        json.loads(text, parse_constant=_reject_nan)
    except json.JSONDecodeError as exc:
        return reason("invalid_json", f"{exc.msg} (col {exc.colno})")
    except RecursionError:
        return reason("invalid_json", "nested too deeply for the decoder (over ~1000 levels)")
    except ValueError as exc:
        return reason("invalid_json", str(exc) or type(exc).__name__)
    # Valid for the stdlib but not for orjson: lone surrogates, numbers beyond a double.
    return reason("invalid_json", f"{fast_error.msg} (col {fast_error.colno})")
