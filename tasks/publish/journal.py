"""Resume: the staging folder's journal of finished shards, and the helper that makes shards durable.

Each finished shard is fsynced (on a helper thread while the next shard is written) and then recorded in
``.vlmforge-journal.jsonl`` in the staging folder (name, keys, size, sha256 and a fingerprint of the
samples: keys, record bytes, media names, sizes and sha256). A later call with the same header (subset,
shard limits, sample format, byte layout version) keeps a recorded shard when the same samples arrive for
it again; anything else in the staging folder is discarded (:func:`open_staging`).
"""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

from .swap import remove

__all__ = ["JOURNAL_NAME", "Journal", "Syncer", "journal_header", "open_staging"]

JOURNAL_NAME = ".vlmforge-journal.jsonl"
#: Bump when the bytes written for the same samples change: it invalidates resume journals.
_LAYOUT_VERSION = 2


class Journal:
    """Append-only record of finished shards in the staging folder (one JSON object per line)."""

    def __init__(self, path: Path, header: dict[str, Any], fsync: bool) -> None:
        self.path, self.header, self.fsync = path, header, fsync
        #: the shards an earlier, interrupted attempt recorded (what this one verifies and keeps); what this
        #: attempt records goes to the file only: its entries hold every key of the subset
        self.entries: dict[str, dict[str, Any]] = {}

    @classmethod
    def load(cls, path: Path, header: dict[str, Any], fsync: bool) -> Journal | None:
        """The journal at ``path`` when its header matches ``header``, else None."""
        try:
            lines = path.read_bytes().split(b"\n")
            if json.loads(lines[0]) != header:
                return None
        except (OSError, ValueError, IndexError):
            return None
        journal = cls(path, header, fsync)
        for line in lines[1:]:
            try:
                entry = json.loads(line)
            except ValueError:  # a line cut short by a kill: that shard was not recorded
                break
            if isinstance(entry, dict) and isinstance(entry.get("shard"), str):
                journal.entries[entry["shard"]] = entry
        return journal

    def create(self) -> None:
        self._append(self.header, mode="wb")

    def record(self, entry: dict[str, Any]) -> None:
        self._append(entry, mode="ab")

    def _append(self, obj: dict[str, Any], mode: str) -> None:
        with self.path.open(mode) as handle:
            handle.write(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n")
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())


class Syncer:
    """Makes finished shards durable and records them in the journal, in order, on a helper thread, so the
    next shard is written while the previous one is fsynced (the journal only ever names durable shards).
    Without ``fsync`` it closes and records at once."""

    def __init__(self, journal: Journal, fsync: bool) -> None:
        self.journal, self.fsync = journal, fsync
        self._error: BaseException | None = None
        self._queue: queue.Queue[tuple[Any, dict[str, Any]] | None] = queue.Queue(maxsize=4)
        self._thread: threading.Thread | None = None
        if fsync:
            self._thread = threading.Thread(target=self._run, name="vlmforge-shard-fsync", daemon=True)
            self._thread.start()

    def _commit(self, handle: Any, entry: dict[str, Any]) -> None:
        try:
            if self.fsync:
                os.fsync(handle.fileno())
        finally:
            handle.close()
        self.journal.record(entry)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            handle, entry = item
            if self._error is not None:
                handle.close()
                continue
            try:
                self._commit(handle, entry)
            except BaseException as exc:  # reported by drain()
                self._error = exc

    def submit(self, handle: Any, entry: dict[str, Any]) -> None:
        if self._error is not None:
            raise self._error
        if self._thread is None:
            self._commit(handle, entry)
        else:
            self._queue.put((handle, entry))

    def drain(self) -> None:
        """Wait until every submitted shard is durable and recorded; re-raise a failure."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None:
            raise self._error


def journal_header(subset: str, max_bytes: int, max_samples: int, sample_format: str) -> dict[str, Any]:
    """What a journal must match to be resumed: a change of any of these changes the shards."""
    return {
        "format": _LAYOUT_VERSION,
        "subset": subset,
        "max_bytes": max_bytes,
        "max_samples": max_samples,
        "sample_format": sample_format,
    }


def open_staging(staging: Path, header: dict[str, Any], resume: bool, fsync: bool) -> Journal:
    """The journal of a resumable staging folder (emptied of what it does not record), or a fresh one."""
    journal_path = staging / JOURNAL_NAME
    journal = Journal.load(journal_path, header, fsync) if resume and staging.is_dir() else None
    if journal is None:
        remove(staging)
        staging.mkdir()
        journal = Journal(journal_path, header, fsync)
        journal.create()
        return journal
    keep = set(journal.entries) | {JOURNAL_NAME}
    for path in staging.iterdir():  # partial shards, a killed prepare's .nv-meta / .tar.idx, the manifest
        if path.name not in keep:
            remove(path)
    return journal
