"""Shards of one split, rolling over by bytes and by samples, with finished shards of an earlier attempt kept.

Shards are named ``{split}-{subset}-{n:06d}.tar`` and roll over by bytes (``shard_max_bytes``, the tar's
size without the final record padding) and by samples (``shard_max_samples``); a sample larger than
``shard_max_bytes`` gets a shard of its own. :func:`parse_size` reads the byte limit as users write it.

A shard recorded in the resume journal is first *verified*: incoming samples are only remembered (media not
loaded) while their keys follow the recorded ones; if the shard ends with the recorded count and
fingerprint and its file is intact it is kept, otherwise the remembered samples are written after all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...schemas.option_values import size_bytes
from ...schemas.sample_keys import Split
from ..errors import ConfigError
from .journal import Journal, Syncer
from .tar import TarMember, TarOut
from .tar_members import BLOCK, Prepared

__all__ = ["Done", "OnDone", "ShardWriter", "parse_size"]


def parse_size(text: str | int) -> int:
    """Bytes from a size such as ``1GB`` or ``512MiB`` (:func:`size_bytes`); :class:`ConfigError` with the
    accepted forms otherwise."""
    try:
        return size_bytes(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass
class Done:
    """A finished shard: written now, or kept (``reused``) from an interrupted earlier attempt."""

    shard: str
    split: Split
    keys: list[str]
    bytes: int
    sha256: str
    tokens: int | None
    reused: bool


#: Called with each finished shard, in the order shards finish: with the members written (as
#: :func:`~.tar.tar_members` reads them back), or None for a shard kept from an earlier attempt.
OnDone = Callable[[Done, list[TarMember] | None], None]


class ShardWriter:
    """Writes ``{split}-{subset}-{n:06d}.tar`` shards for one split, rolling by bytes and sample count;
    hands each finished shard to ``on_done``."""

    def __init__(
        self,
        root: Path,
        split: Split,
        subset: str,
        max_bytes: int,
        max_samples: int,
        journal: Journal,
        syncer: Syncer,
        on_done: OnDone,
    ) -> None:
        self.root, self.split, self.subset = root, split, subset
        self.max_bytes, self.max_samples = max_bytes, max_samples
        self.journal, self.syncer, self.on_done = journal, syncer, on_done
        self.index = 0
        self.diverged = False  # once a recorded shard did not match, later ones are written directly
        self._open = False
        self._name = ""
        self._out: TarOut | None = None
        self._buffer: list[Prepared] = []
        self._keys: list[str] = []
        self._size = 0
        self._tokens: int | None = 0
        self._fingerprint = hashlib.sha256()

    def add(self, sample: Prepared) -> None:
        if self._open and self._is_full(sample):
            self.close()
        if not self._open:
            self._start()
        self._verify_or_write(sample)
        if self._out is not None:
            self._out.add(sample)
        self._keys.append(sample.key)
        self._size += sample.nbytes
        self._fingerprint.update(sample.digest)
        self._tokens = None if self._tokens is None or sample.tokens is None else self._tokens + sample.tokens

    def _is_full(self, sample: Prepared) -> bool:
        # + the 2-block end-of-archive marker; the 10 KiB record padding is not counted, so a shard can
        # exceed max_bytes by < 10 KiB (and a single sample larger than max_bytes gets a shard of its own).
        return len(self._keys) >= self.max_samples or self._size + sample.nbytes + 2 * BLOCK > self.max_bytes

    def _start(self) -> None:
        self._name = f"{self.split}-{self.subset}-{self.index:06d}.tar"
        self.index += 1
        self._open = True
        self._keys, self._buffer, self._size, self._tokens = [], [], 0, 0
        self._fingerprint = hashlib.sha256()
        if self.diverged or self._name not in self.journal.entries:
            self._out = TarOut(self.root / self._name)

    def _verify_or_write(self, sample: Prepared) -> None:
        """While verifying a recorded shard, remember ``sample`` if it is the next recorded key; else stop
        verifying and write the shard."""
        recorded = None if self._out is not None else self.journal.entries.get(self._name)
        if recorded is None:
            return
        keys = recorded.get("keys") or []
        if len(self._keys) < len(keys) and keys[len(self._keys)] == sample.key:
            self._buffer.append(sample)
        else:
            self._write_buffered()

    def _write_buffered(self) -> None:
        """Stop verifying the current shard: write it from its remembered samples."""
        self.diverged = True
        self._out = TarOut(self.root / self._name)
        for sample in self._buffer:
            self._out.add(sample)
        self._buffer = []

    def close(self) -> None:
        if not self._open:
            return
        fingerprint = self._fingerprint.hexdigest()
        if self._out is None:  # verifying a recorded shard
            entry = self.journal.entries[self._name]
            if self._matches(entry, fingerprint):
                self._keep(entry)
                return
            self._write_buffered()
        self._finish(fingerprint)

    def _matches(self, entry: dict[str, Any], fingerprint: str) -> bool:
        path = self.root / self._name
        return (
            entry.get("keys") == self._keys
            and entry.get("fingerprint") == fingerprint
            and path.is_file()
            and path.stat().st_size == entry.get("bytes")
        )

    def _keep(self, entry: dict[str, Any]) -> None:
        done = Done(self._name, self.split, self._keys, entry["bytes"], entry["sha256"], self._tokens, True)
        self._open, self._buffer = False, []
        self.on_done(done, None)

    def _finish(self, fingerprint: str) -> None:
        assert self._out is not None
        size, sha = self._out.finish()
        handle, members, self._out = self._out.handle, self._out.members, None
        entry = {
            "shard": self._name,
            "keys": self._keys,
            "bytes": size,
            "sha256": sha,
            "fingerprint": fingerprint,
        }
        self.syncer.submit(handle, entry)
        self._open = False
        self.on_done(Done(self._name, self.split, self._keys, size, sha, self._tokens, False), members)

    def abort(self) -> None:
        if self._out is not None:
            self._out.abort()
            self._out = None
        self._open = False
