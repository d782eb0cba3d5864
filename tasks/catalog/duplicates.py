"""Duplicate rows and id conflicts across a whole subset, found cheaply and confirmed exactly.

No parse batch sees the whole subset, so the catalog's scan looks for repeats:

* a row identical (byte for byte, ignoring a trailing ``\\r``) to an earlier row: ``duplicate_rows``,
  rejected as ``duplicate_row`` by the batch that owns it;
* a row whose id (as an Energon key) repeats an earlier row's with other content: ``id_conflicts``, kept
  under the distinct key ``<key>__line<N>`` and flagged.

The scan keeps two 64-bit hashes per line (:func:`hash64` of the row and of its key, 0 for a blank line);
:func:`resolve_duplicates` groups equal hashes and confirms the candidates with a strong digest from a
second read of only those lines, so a hash collision never reports a false duplicate.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Callable, Iterator

import orjson

from ...schemas.sample_keys import sanitize_key

Lines = Callable[[], Iterator[tuple[int, bytes, int]]]  # (line, bytes, offset) of the file, read afresh

_ID_SIMPLE = re.compile(rb'\{\s*"id"\s*:\s*"([^"\\]*)"')  # {"id": "plain"} (no escapes): the common case
_ID_FAST = re.compile(rb'^\s*\{\s*"id"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(-?\d+)\s*[,}])')


def line_id(raw: bytes) -> str | None:
    """The record id the parser will see for this line (None when it has none or is not JSON)."""
    m = _ID_SIMPLE.match(raw)
    if m is None:
        m = _ID_FAST.match(raw)
    if m is not None and raw.count(b'"id"') == 1:
        if m.lastindex == 2 and m.group(2) is not None:
            return str(int(m.group(2)))
        text = m.group(1)
        if b"\\" not in text:
            try:
                return text.decode("utf-8") if text.strip() else None
            except UnicodeDecodeError:
                return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    sid = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(sid, int) and not isinstance(sid, bool):
        return str(sid)
    return sid if isinstance(sid, str) and sid.strip() else None


def hash64(value: bytes | str) -> int:
    h = hash(value)  # SipHash: fast; candidates are confirmed exactly before anything is reported
    return h if h != 0 else 1


def _equal_groups(values: array) -> list[list[int]]:
    """Groups (of 0-based positions, ascending) of equal non-zero values; only groups of two or more."""
    import numpy as np

    arr = np.frombuffer(values, dtype=np.int64) if len(values) else np.zeros(0, np.int64)
    order = np.argsort(arr, kind="stable")
    srt = arr[order]
    same = (srt[1:] == srt[:-1]) & (srt[1:] != 0)
    if not same.any():
        return []
    groups: list[list[int]] = []
    idx = np.flatnonzero(same)
    current: list[int] = []
    prev = -2
    for i in idx.tolist():
        if i != prev + 1:
            if current:
                groups.append(current)
            current = [int(order[i])]
        current.append(int(order[i + 1]))
        prev = i
    if current:
        groups.append(current)
    return [sorted(g) for g in groups]


def resolve_duplicates(
    lines: Lines, subset: str, row_h: array, key_h: array
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, str], ...]]:
    """(duplicate rows as (line, earlier line), id conflicts as (line, earlier line, distinct key)).

    ``row_h`` / ``key_h`` hold each line's row and key hash (0: blank line or no id); ``lines`` reads the
    file again, once, only when some hashes repeat.
    """
    row_groups = _equal_groups(row_h)
    key_groups = _equal_groups(key_h)
    if not row_groups and not key_groups:
        return (), ()
    wanted = {i + 1 for g in row_groups + key_groups for i in g}
    seen = _confirm(lines, subset, wanted)
    duplicates = _exact_duplicates(row_groups, seen)
    conflicts = _id_conflicts(key_groups, seen, duplicates, key_h)
    return tuple(sorted(duplicates.items())), tuple(sorted(conflicts))


def _confirm(lines: Lines, subset: str, wanted: set[int]) -> dict[int, tuple[bytes, str | None]]:
    """A strong digest of each candidate row and its key, from a second pass."""
    seen: dict[int, tuple[bytes, str | None]] = {}
    for line, raw, _ in lines():
        if line in wanted:
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            sid = line_id(raw)
            seen[line] = (
                hashlib.blake2b(raw, digest_size=16).digest(),
                sanitize_key(subset, sid) if sid else None,
            )
    return seen


def _exact_duplicates(
    row_groups: list[list[int]], seen: dict[int, tuple[bytes, str | None]]
) -> dict[int, int]:
    duplicates: dict[int, int] = {}
    for g in row_groups:
        first_by_digest: dict[bytes, int] = {}
        for i in g:
            line = i + 1
            digest = seen[line][0]
            if digest in first_by_digest:
                duplicates[line] = first_by_digest[digest]
            else:
                first_by_digest[digest] = line
    return duplicates


def _id_conflicts(
    key_groups: list[list[int]],
    seen: dict[int, tuple[bytes, str | None]],
    duplicates: dict[int, int],
    key_h: array,
) -> list[tuple[int, int, str]]:
    taken = _TakenKeys(key_h)
    conflicts: list[tuple[int, int, str]] = []
    for g in key_groups:
        first_by_key: dict[str, int] = {}
        for i in g:
            line = i + 1
            if line in duplicates:
                continue
            key = seen[line][1]
            if key is None:
                continue
            if key not in first_by_key:
                first_by_key[key] = line
                continue
            distinct = f"{key}__line{line}"
            n = 2
            while distinct in taken:
                distinct, n = f"{key}__line{line}_{n}", n + 1
            taken.add(distinct)
            conflicts.append((line, first_by_key[key], distinct))
    return conflicts


class _TakenKeys:
    """The keys a distinct key must not collide with: every key of the subset (as hashes) and the
    distinct keys handed out so far."""

    def __init__(self, key_h: array) -> None:
        import numpy as np

        self._np = np
        self._taken = np.sort(np.frombuffer(key_h, dtype=np.int64)) if len(key_h) else np.zeros(0, np.int64)
        self._new: set[str] = set()

    def __contains__(self, key: str) -> bool:
        hv = hash64(key)
        pos = int(self._np.searchsorted(self._taken, hv))
        return key in self._new or (pos < len(self._taken) and int(self._taken[pos]) == hv)

    def add(self, key: str) -> None:
        self._new.add(key)
