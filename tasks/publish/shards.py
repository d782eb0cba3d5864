"""Write one Megatron-Energon WebDataset per subset (deterministic tars + Energon's own prepare).

Layout of a published dataset ``dest`` (see docs energon-format.md §1, §11)::

    dest/
    ├── train-<subset>-000000.tar (+ .tar.idx)     # uncompressed, deterministic GNU tars
    ├── val-<subset>-000000.tar   (+ .tar.idx)     # only when the val split is non-empty
    ├── vlmforge-shards.json                      # [{shard, split, samples, bytes, sha256, tokens, keys}]
    └── .nv-meta/{.info.json, split.yaml, index.sqlite, index.uuid, dataset.yaml, dataset_psi<N>.yaml}

Choices:

* **Empty splits are omitted from ``split.yaml``** (only split patterns matching >= 1 shard are passed to
  ``prepare_dataset``). Energon raises ``EmptyDatasetError`` for a split with an empty shard list and an
  ``AssertionError("Invalid split part")`` for a missing one, so callers must not load a missing
  split: :func:`write_metadataset` lists a subset under ``val`` (or ``train``) only if its ``split.yaml``
  has that split.
* ``dataset.yaml`` is the crude form (``CrudeWebdataset``), loadable with only megatron-energon installed;
  cook with :mod:`vlmforge.energon`. ``dataset_psi<N>.yaml`` (N = 1, 2, 4, 8) are the same with
  ``parallel_shard_iters: N``: a blend of many subsets picks one per leaf (``dataset_config:``) so a loader
  worker keeps few tar handles open per subset (energon-format.md §8, issue #81; see :mod:`.mix`).
* Tars are GNU format (long names via ``././@LongLink``, never pax headers), members ``<key>.json`` then
  the media parts in the given order, ``mtime=0``, ``uid=gid=0``, empty user/group names, mode ``0o644``,
  padded to 10 KiB records exactly like :mod:`tarfile`; the bytes depend only on the samples, so a rewrite,
  a resumed write or another machine gives byte-identical shards.
* Shards roll over by bytes (``shard_max_bytes``, the tar's size without the final record padding) and by
  samples (``shard_max_samples``); a sample larger than ``shard_max_bytes`` gets a shard of its own.
* Media may be given as bytes or as :class:`MediaPart` (size + sha256 + a loader): the latter is read only
  when its shard is written, so a resumed write skips finished shards without reading their media.

Atomicity and resume: everything is built in ``dest.parent/.<dest.name>.staging``. Each finished shard is
fsynced (on a helper thread while the next shard is written) and then recorded in
``.vlmforge-journal.jsonl`` there (name, keys, size, sha256 and a fingerprint of the samples: keys, json
bytes, media names, sizes and sha256). A later call with the same
subset and shard limits keeps a recorded shard when the same samples arrive for it again and writes the
rest; anything else in the staging folder is discarded. Then Energon's prepare runs on the staging folder
and the folder is swapped into place in one ``renameat2(RENAME_EXCHANGE)`` (two renames where that is not
available; a leftover ``.<dest.name>.old`` is put back by the next call). A loader never sees a partial
dataset: ``dest`` is the previous complete dataset or the new complete one.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError
from ..storage import OutputFullError, no_space

__all__ = [
    "DATASET_YAML",
    "JOURNAL_NAME",
    "MANIFEST_NAME",
    "PSI_CONFIGS",
    "DatasetResult",
    "DuplicateKeyError",
    "EnergonPrepareError",
    "MediaPart",
    "ShardInfo",
    "ShardSample",
    "dataset_splits",
    "default_prepare_workers",
    "ensure_dataset_config",
    "expected_keys",
    "file_sha256",
    "parse_size",
    "read_manifest",
    "sanitize_key",
    "split_for_key",
    "write_energon_dataset",
    "write_metadataset",
]

Split = Literal["train", "val"]
SPLITS: tuple[Split, ...] = ("train", "val")
MANIFEST_NAME = "vlmforge-shards.json"
JOURNAL_NAME = ".vlmforge-journal.jsonl"
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
#: ``parallel_shard_iters`` values with a ready ``.nv-meta/dataset_psi<N>.yaml`` in every dataset.
PSI_CONFIGS = (1, 2, 4, 8)
#: Bump when the bytes written for the same samples change: it invalidates resume journals.
_FORMAT_VERSION = 2
_BLOCK = tarfile.BLOCKSIZE  # 512
_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads the archive to a multiple of this
_KEY_RE = re.compile(r"[^A-Za-z0-9_-]+")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(i?)b?|b)?\s*$", re.IGNORECASE)
_SIZE_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_WRITE_BUFFER = 1 << 20
_SMALL_WRITE = 1 << 16


class DuplicateKeyError(ValueError):
    """A sample key occurs twice in one dataset (Energon requires dataset-wide unique keys)."""


class EnergonPrepareError(RuntimeError):
    """megatron-energon's prepare failed (it calls ``sys.exit`` on duplicate keys) or disagrees with us."""


def parse_size(text: str | int) -> int:
    """Bytes from a size such as ``1GB``, ``512MiB``, ``1.5G``, ``700kb`` or ``4096`` (plain bytes).

    Decimal units (``KB``, ``MB``, ``GB``, ``TB``, ``PB``, with or without ``B``) are powers of 1000, binary
    units (``KiB``, ``MiB``, ...) powers of 1024, case-insensitive. Raises :class:`ConfigError` with the
    accepted forms otherwise (also for zero).
    """
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        match = _SIZE_RE.match(str(text))
        if not match:
            raise ConfigError(
                f"invalid size {text!r}: use a number with an optional unit, e.g. 1GB, 512MiB, 1.5G, 4096"
            )
        number, unit, binary = match.group(1), (match.group(2) or "").lower(), bool(match.group(3))
        value = float(number) * (1024 if binary else 1000) ** _SIZE_POWER[unit]
    if value < 1:
        raise ConfigError(f"invalid size {text!r}: must be at least 1 byte")
    return int(value)


def _sha256(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class MediaPart:
    """A media part whose bytes are read only when its shard is written.

    ``size`` and ``sha256`` describe the bytes ``load()`` returns (a mismatch in size aborts the write);
    they identify the part in the resume journal, so a finished shard is kept without reading its media.
    """

    name: str
    size: int
    sha256: str
    load: Callable[[], bytes] = field(repr=False, compare=False)

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> MediaPart:
        payload = bytes(data)
        return cls(name=name, size=len(payload), sha256=_sha256(payload), load=lambda: payload)


@dataclass(frozen=True)
class ShardSample:
    """One sample to write. ``key`` must already be sanitised (no dots); ``media`` parts are ``(name, bytes)``
    pairs or :class:`MediaPart`, in order of appearance (``0.jpg``, ``1.png``, ``2.mp4``, ...)."""

    key: str
    split: Split
    json: dict[str, Any]
    media: tuple[tuple[str, bytes] | MediaPart, ...] = ()


@dataclass(frozen=True)
class ShardInfo:
    shard: str
    split: Split
    samples: int
    bytes: int
    sha256: str
    #: Sum of ``json.vlmforge.total_tokens`` over the shard's samples (None when a sample has none).
    tokens: int | None = None


@dataclass
class DatasetResult:
    path: Path
    shards: list[ShardInfo] = field(default_factory=list)
    samples: int = 0
    #: Shards kept from an interrupted earlier write (same samples, so the same bytes) instead of rewritten.
    reused_shards: int = 0

    def split_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for shard in self.shards:
            counts[shard.split] = counts.get(shard.split, 0) + shard.samples
        return counts


def sanitize_key(subset: str, sample_id: str) -> str:
    """Megatron-Bridge's key rule: ``<subset>__<id>`` with every run of other characters replaced by ``_``."""
    return _KEY_RE.sub("_", f"{subset}__{sample_id}")


def split_for_key(key: str, val_fraction: float) -> Split:
    """Deterministic split: ``val`` when the first 64 bits of sha256(key) / 2**64 fall below the fraction."""
    value = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], 16) / 2**64
    return "val" if value < val_fraction else "train"


def _encode_json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def _tar_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


@dataclass
class _Prepared:
    """A validated sample with its tar headers, byte count and identity digest (no media bytes loaded)."""

    key: str
    json: bytes
    parts: list[MediaPart]
    headers: list[bytes]
    nbytes: int
    digest: bytes
    tokens: int | None


def _prepare(sample: ShardSample) -> _Prepared:
    key = sample.key
    if not isinstance(key, str) or not key or "." in key or "/" in key:
        raise ValueError(f"invalid sample key {key!r}: must be non-empty without '.' or '/'")
    if sample.split not in SPLITS:
        raise ValueError(f"sample {key!r}: invalid split {sample.split!r}")
    parts: list[MediaPart] = []
    seen = {"json"}
    for item in sample.media:
        if isinstance(item, MediaPart):
            part = item
        else:
            name, data = item
            if not isinstance(data, bytes | bytearray | memoryview):
                raise TypeError(f"sample {key!r}: part {name!r} is not bytes")
            part = MediaPart.from_bytes(name, bytes(data))
        if not part.name or "/" in part.name or part.name in seen:
            raise ValueError(f"sample {key!r}: invalid or repeated part name {part.name!r}")
        if part.size < 0:
            raise ValueError(f"sample {key!r}: part {part.name!r} has a negative size")
        seen.add(part.name)
        parts.append(part)
    payload = _encode_json(sample.json)
    headers = [_tar_header(f"{key}.json", len(payload))]
    headers += [_tar_header(f"{key}.{part.name}", part.size) for part in parts]
    nbytes = sum(map(len, headers)) + _padded(len(payload)) + sum(_padded(p.size) for p in parts)
    digest = hashlib.sha256()
    digest.update(f"{key}\0{len(payload)}\0".encode())
    digest.update(payload)
    for part in parts:
        digest.update(f"\0{part.name}\0{part.size}\0{part.sha256}".encode())
    meta = sample.json.get("vlmforge") if isinstance(sample.json, dict) else None
    tokens = meta.get("total_tokens") if isinstance(meta, dict) else None
    return _Prepared(
        key=key,
        json=payload,
        parts=parts,
        headers=headers,
        nbytes=nbytes,
        digest=digest.digest(),
        tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
    )


class _Hasher:
    """sha256 of a byte stream on a helper thread (hashlib releases the GIL), so hashing overlaps writing."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._run, name="vlmforge-shard-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def update(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def hexdigest(self) -> str:
        self._queue.put(None)
        self._thread.join()
        return self._hash.hexdigest()

    def abort(self) -> None:
        self._queue.put(None)


class _TarOut:
    """A shard being written: GNU tar bytes out, sha256 of what was written, tarfile-identical padding.

    Headers and padding are gathered into chunks of ~1 MiB; media bytes go out as they are. Each chunk is
    written with plain ``write`` calls and handed to a :class:`_Hasher`.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("wb", buffering=0)
        self.hasher = _Hasher()
        self.offset = 0
        self._small = bytearray()

    def _write(self, data: bytes) -> None:
        self.offset += len(data)
        if len(data) < _SMALL_WRITE:
            self._small += data
            if len(self._small) >= _WRITE_BUFFER:
                self._flush_small()
        else:
            self._flush_small()
            self._emit(data)

    def _flush_small(self) -> None:
        if self._small:
            chunk, self._small = bytes(self._small), bytearray()
            self._emit(chunk)

    def _emit(self, chunk: bytes) -> None:
        self.hasher.update(chunk)
        view = memoryview(chunk)
        while view:
            written = self.handle.write(view)
            view = view[written or 0 :]

    def add(self, sample: _Prepared) -> None:
        self._member(sample.headers[0], sample.json, None)
        for header, part in zip(sample.headers[1:], sample.parts, strict=True):
            self._member(header, part.load(), part)

    def _member(self, header: bytes, data: bytes, part: MediaPart | None) -> None:
        if part is not None and len(data) != part.size:
            raise OSError(
                f"{self.path.name}: media part {part.name!r} (sha256 {part.sha256[:12]}…) has {len(data)} "
                f"bytes, {part.size} were announced"
            )
        self._write(header)
        self._write(data)
        pad = -len(data) % _BLOCK
        if pad:
            self._write(b"\0" * pad)

    def finish(self) -> tuple[int, str]:
        """End-of-archive marker and record padding (as ``tarfile.TarFile.close``); the handle stays open
        for the :class:`_Syncer` to fsync and close."""
        self._write(b"\0" * (2 * _BLOCK))
        remainder = self.offset % _RECORD
        if remainder:
            self._write(b"\0" * (_RECORD - remainder))
        self._flush_small()
        return self.offset, self.hasher.hexdigest()

    def abort(self) -> None:
        """Drop the unfinished shard: it is not in the journal, so no resume would keep it, and after a full
        disk its bytes would hold the space the rest of the run needs."""
        self.hasher.abort()
        self.handle.close()
        with contextlib.suppress(OSError):
            self.path.unlink()


class _Journal:
    """Append-only record of finished shards in the staging folder (one JSON object per line)."""

    def __init__(self, path: Path, header: dict[str, Any], fsync: bool) -> None:
        self.path, self.header, self.fsync = path, header, fsync
        self.entries: dict[str, dict[str, Any]] = {}

    @classmethod
    def load(cls, path: Path, header: dict[str, Any], fsync: bool) -> _Journal | None:
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
        self.entries[entry["shard"]] = entry

    def _append(self, obj: dict[str, Any], mode: str) -> None:
        with self.path.open(mode) as handle:
            handle.write(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n")
            handle.flush()
            if self.fsync:
                os.fsync(handle.fileno())


class _Syncer:
    """Makes finished shards durable and records them in the journal, in order, on a helper thread, so the
    next shard is written while the previous one is fsynced (the journal only ever names durable shards).
    Without ``fsync`` it closes and records at once."""

    def __init__(self, journal: _Journal, fsync: bool) -> None:
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


@dataclass
class _Done:
    shard: str
    split: Split
    keys: list[str]
    bytes: int
    sha256: str
    tokens: int | None
    reused: bool


class _ShardWriter:
    """Writes ``{split}-{subset}-{n:06d}.tar`` shards for one split, rolling by bytes and sample count.

    A shard recorded in the journal is first *verified*: incoming samples are only remembered (media not
    loaded) while their keys follow the recorded ones; if the shard ends with the recorded count and
    fingerprint and its file is intact it is kept, otherwise the remembered samples are written after all.
    """

    def __init__(
        self,
        root: Path,
        split: Split,
        subset: str,
        max_bytes: int,
        max_samples: int,
        journal: _Journal,
        syncer: _Syncer,
    ) -> None:
        self.root, self.split, self.subset = root, split, subset
        self.max_bytes, self.max_samples = max_bytes, max_samples
        self.journal, self.syncer = journal, syncer
        self.index = 0
        self.done: list[_Done] = []
        self.diverged = False  # once a recorded shard did not match, later ones are written directly
        self._open = False
        self._name = ""
        self._out: _TarOut | None = None
        self._buffer: list[_Prepared] = []
        self._keys: list[str] = []
        self._size = 0
        self._tokens: int | None = 0
        self._fingerprint = hashlib.sha256()

    def add(self, sample: _Prepared) -> None:
        # + the 2-block end-of-archive marker; the 10 KiB record padding is not counted, so a shard can
        # exceed max_bytes by < 10 KiB (and a single sample larger than max_bytes gets a shard of its own).
        if self._open and (
            len(self._keys) >= self.max_samples or self._size + sample.nbytes + 2 * _BLOCK > self.max_bytes
        ):
            self.close()
        if not self._open:
            self._start()
        recorded = None if self._out is not None else self.journal.entries.get(self._name)
        if recorded is not None:
            keys = recorded.get("keys") or []
            if len(self._keys) < len(keys) and keys[len(self._keys)] == sample.key:
                self._buffer.append(sample)
            else:
                self._write_buffered()
        if self._out is not None:
            self._out.add(sample)
        self._keys.append(sample.key)
        self._size += sample.nbytes
        self._fingerprint.update(sample.digest)
        self._tokens = None if self._tokens is None or sample.tokens is None else self._tokens + sample.tokens

    def _start(self) -> None:
        self._name = f"{self.split}-{self.subset}-{self.index:06d}.tar"
        self.index += 1
        self._open = True
        self._keys, self._buffer, self._size, self._tokens = [], [], 0, 0
        self._fingerprint = hashlib.sha256()
        if self.diverged or self._name not in self.journal.entries:
            self._out = _TarOut(self.root / self._name)

    def _write_buffered(self) -> None:
        """Stop verifying the current shard: write it from its remembered samples."""
        self.diverged = True
        self._out = _TarOut(self.root / self._name)
        for sample in self._buffer:
            self._out.add(sample)
        self._buffer = []

    def close(self) -> None:
        if not self._open:
            return
        fingerprint = self._fingerprint.hexdigest()
        if self._out is None:  # verifying a recorded shard
            entry = self.journal.entries[self._name]
            path = self.root / self._name
            if (
                entry.get("keys") == self._keys
                and entry.get("fingerprint") == fingerprint
                and path.is_file()
                and path.stat().st_size == entry.get("bytes")
            ):
                self.done.append(
                    _Done(
                        self._name,
                        self.split,
                        self._keys,
                        entry["bytes"],
                        entry["sha256"],
                        self._tokens,
                        True,
                    )
                )
                self._open, self._buffer = False, []
                return
            self._write_buffered()
        assert self._out is not None
        size, sha = self._out.finish()
        handle, self._out = self._out.handle, None
        entry = {
            "shard": self._name,
            "keys": self._keys,
            "bytes": size,
            "sha256": sha,
            "fingerprint": fingerprint,
        }
        self.syncer.submit(handle, entry)
        self.done.append(_Done(self._name, self.split, self._keys, size, sha, self._tokens, False))
        self._open = False

    def abort(self) -> None:
        if self._out is not None:
            self._out.abort()
            self._out = None
        self._open = False


def _check_tar(path: Path, expected: list[str]) -> None:
    """Re-open a written shard and check its members form exactly the expected samples, in order."""
    keys: list[str] = []
    with tarfile.open(path, "r:") as tar:
        for member in tar:
            if not member.isreg():
                raise EnergonPrepareError(f"{path.name}: unexpected non-file member {member.name!r}")
            key = member.name.split(".", 1)[0]
            if not keys or keys[-1] != key:
                keys.append(key)
    if keys != expected:
        first = next((i for i, (a, b) in enumerate(zip(keys, expected, strict=False)) if a != b), len(keys))
        raise EnergonPrepareError(
            f"{path.name}: re-read {len(keys)} samples, wrote {len(expected)} (first difference at {first})"
        )


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2(RENAME_EXCHANGE)``); False if unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return int(renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)) == 0


def default_prepare_workers(n_tars: int) -> int:
    """Processes for Energon's prepare: one per CPU, at most one per shard, at most 8."""
    return max(1, min(n_tars, os.cpu_count() or 1, 8))


@contextlib.contextmanager
def _default_sigterm() -> Iterator[None]:
    """SIGTERM with its default action while Energon's prepare runs (main thread only).

    Prepare forks its workers and SIGTERMs them when it fails (e.g. on a full disk). A forked child inherits
    the caller's handler; a Ray worker's raises ``SystemExit``, which, delivered while the child is still in
    ``os.fork()``, sends the child back into the caller's own code as a second copy of the task, and the
    parent then waits for it forever. With the default action a terminated child simply ends.
    """
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield  # a handler installed outside Python cannot be restored; other threads cannot set one
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_prepare(root: Path, tar_names: list[str], patterns: Sequence[tuple[str, str]], workers: int) -> None:
    from megatron.energon import BaseWebdatasetFactory

    try:
        with _default_sigterm():
            BaseWebdatasetFactory.prepare_dataset(
                root, tar_names, split_parts_patterns=list(patterns), shuffle_seed=None, workers=workers
            )
    except OSError as exc:
        full = no_space(exc, str(root))
        if full is None:
            raise
        raise full from exc
    except SystemExit as exc:  # energon calls sys.exit(1) on duplicate keys, and when a shard failed to index
        if _nearly_full(root):  # the failure was the disk's (logged by energon), not the samples'
            raise OutputFullError(
                f"no space left on the output volume while megatron-energon indexed {root}: free space and "
                "rerun the same command; committed work is kept and resumed"
            ) from exc
        raise EnergonPrepareError(
            f"megatron-energon prepare exited with status {exc.code} for {root}"
        ) from exc
    except AssertionError as exc:  # e.g. "Shard X has no samples."
        raise EnergonPrepareError(f"megatron-energon prepare failed for {root}: {exc}") from exc


def _nearly_full(path: Path, margin: int = 1 << 20) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def _psi_yaml(parallel_shard_iters: int) -> str:
    return DATASET_YAML + f"parallel_shard_iters: {parallel_shard_iters}\n"


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide metadataset.yaml from a training job's user
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        full = no_space(exc, str(path))
        if full is not None:
            raise full from exc
        raise


def ensure_dataset_config(dataset: Path, parallel_shard_iters: int) -> str | None:
    """The ``dataset_config`` name that loads ``dataset`` with at most ``parallel_shard_iters`` open shards
    per loader worker (None for Energon's default of 16: plain ``dataset.yaml``).

    Datasets written by :func:`write_energon_dataset` ship ``dataset_psi{1,2,4,8}.yaml``; any other value is
    written on demand (atomically; the content depends only on the value).
    """
    if parallel_shard_iters < 1:
        raise ValueError("parallel_shard_iters must be positive")
    if parallel_shard_iters >= 16:
        return None
    name = f"dataset_psi{parallel_shard_iters}.yaml"
    path = Path(dataset) / ".nv-meta" / name
    text = _psi_yaml(parallel_shard_iters)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        _write_text_atomic(path, text)
    return name


def _journal_header(subset: str, max_bytes: int, max_samples: int) -> dict[str, Any]:
    return {"format": _FORMAT_VERSION, "subset": subset, "max_bytes": max_bytes, "max_samples": max_samples}


def _open_staging(staging: Path, header: dict[str, Any], resume: bool, fsync: bool) -> _Journal:
    """The journal of a resumable staging folder (emptied of what it does not record), or a fresh one."""
    journal_path = staging / JOURNAL_NAME
    journal = _Journal.load(journal_path, header, fsync) if resume and staging.is_dir() else None
    if journal is None:
        _remove(staging)
        staging.mkdir()
        journal = _Journal(journal_path, header, fsync)
        journal.create()
        return journal
    keep = set(journal.entries) | {JOURNAL_NAME}
    for path in staging.iterdir():  # partial shards, a killed prepare's .nv-meta / .tar.idx, the manifest
        if path.name not in keep:
            _remove(path)
    return journal


def _recover_old(dest: Path, old: Path) -> None:
    """Undo a publish interrupted between its two renames (only on filesystems without RENAME_EXCHANGE)."""
    if old.is_dir() and not dest.exists() and (old / ".nv-meta" / ".info.json").is_file():
        os.replace(old, dest)
    _remove(old)


def write_energon_dataset(
    samples: Iterable[ShardSample],
    dest: Path,
    *,
    subset: str,
    shard_max_bytes: int = 1_000_000_000,
    shard_max_samples: int = 10_000,
    fsync: bool = True,
    resume: bool = True,
    prepare_workers: int | None = None,
    check: Callable[[Path], None] | None = None,
) -> DatasetResult:
    """Write ``samples`` as a prepared Energon dataset at ``dest`` (replacing it atomically).

    ``check(staging)`` runs on the complete staged folder before the swap (the ``shards`` quality suite);
    when it raises, the staging folder is removed and the published version stays as it was.

    ``fsync`` makes every shard durable before it is recorded as finished (and the publish rename after
    it); ``resume`` keeps the finished shards of an interrupted earlier call with the same ``subset`` and
    limits when the same samples arrive for them again (see the module docstring). ``prepare_workers`` is
    the process count of Energon's prepare (default :func:`default_prepare_workers`).

    Raises :class:`DuplicateKeyError` on a repeated key, :class:`ValueError` on an invalid sample or an
    empty input (an Energon dataset needs at least one shard), :class:`EnergonPrepareError` if Energon's
    prepare step fails or its counts disagree with what was written; after these the staging folder is
    removed. Any other exception (an I/O error, an interrupt) leaves it in place for the next call to resume.
    """
    if not subset or _KEY_RE.search(subset):
        raise ValueError(f"invalid subset name {subset!r}")
    if shard_max_samples < 1 or shard_max_bytes < 1:
        raise ValueError("shard_max_samples and shard_max_bytes must be positive")
    dest = Path(dest)
    staging = dest.parent / f".{dest.name}.staging"
    old = dest.parent / f".{dest.name}.old"
    dest.parent.mkdir(parents=True, exist_ok=True)
    _recover_old(dest, old)
    header = _journal_header(subset, shard_max_bytes, shard_max_samples)
    journal = _open_staging(staging, header, resume, fsync)
    try:
        result = _build(
            samples, staging, subset, shard_max_bytes, shard_max_samples, journal, fsync, prepare_workers
        )
    except (ValueError, TypeError, EnergonPrepareError):  # the same input would fail the same way again
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if check is not None:
        try:
            check(staging)
        except Exception:  # the staged dataset is refused as a whole; the published one stays
            shutil.rmtree(staging, ignore_errors=True)
            raise
    (staging / JOURNAL_NAME).unlink()
    if fsync:
        _fsync_dir(staging)
    if dest.exists() and _exchange(staging, dest):
        _remove(staging)  # now the previous version
    else:
        if dest.exists() or dest.is_symlink():
            os.replace(dest, old)
        os.replace(staging, dest)
        _remove(old)
    if fsync:
        _fsync_dir(dest.parent)
    result.path = dest
    return result


def _build(
    samples: Iterable[ShardSample],
    root: Path,
    subset: str,
    max_bytes: int,
    max_samples: int,
    journal: _Journal,
    fsync: bool,
    prepare_workers: int | None,
) -> DatasetResult:
    syncer = _Syncer(journal, fsync)
    writers = {
        split: _ShardWriter(root, split, subset, max_bytes, max_samples, journal, syncer) for split in SPLITS
    }
    seen: set[str] = set()
    try:
        for sample in samples:
            prepared = _prepare(sample)
            if prepared.key in seen:
                raise DuplicateKeyError(f"duplicate sample key {prepared.key!r} in subset {subset!r}")
            seen.add(prepared.key)
            writers[sample.split].add(prepared)
        for writer in writers.values():
            writer.close()
        syncer.drain()
    except BaseException as exc:
        for writer in writers.values():
            writer.abort()
        # finished shards still become durable and recorded (the next call resumes from them); the
        # original error is the one to report
        with contextlib.suppress(Exception):
            syncer.drain()
        full = no_space(exc, str(root))
        if full is not None:
            raise full from exc
        raise
    if not seen:
        raise ValueError(f"subset {subset!r} has no samples; an Energon dataset needs at least one shard")

    done = [item for split in SPLITS for item in writers[split].done]
    tar_names = [item.shard for item in done]
    for path in root.iterdir():  # shards of a longer interrupted attempt
        if path.name.endswith(".tar") and path.name not in tar_names:
            _remove(path)
    patterns = [(split, rf"{split}-.*") for split in SPLITS if writers[split].done]
    _run_prepare(root, tar_names, patterns, prepare_workers or default_prepare_workers(len(tar_names)))
    meta = root / ".nv-meta"
    (meta / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")
    for psi in PSI_CONFIGS:
        (meta / f"dataset_psi{psi}.yaml").write_text(_psi_yaml(psi), encoding="utf-8")

    info = json.loads((meta / ".info.json").read_text(encoding="utf-8"))
    shard_counts: dict[str, int] = info.get("shard_counts", {})
    if list(shard_counts) != tar_names:
        raise EnergonPrepareError(f"energon indexed {sorted(shard_counts)}, expected {tar_names}")
    result = DatasetResult(path=root)
    manifest: list[dict[str, Any]] = []
    for item in done:
        path = root / item.shard
        _check_tar(path, item.keys)
        if shard_counts[item.shard] != len(item.keys):
            raise EnergonPrepareError(
                f"{item.shard}: energon counted {shard_counts[item.shard]} samples, "
                f"{len(item.keys)} were written"
            )
        shard = ShardInfo(
            shard=item.shard,
            split=item.split,
            samples=len(item.keys),
            bytes=item.bytes,
            sha256=item.sha256,
            tokens=item.tokens,
        )
        result.shards.append(shard)
        result.samples += shard.samples
        result.reused_shards += item.reused
        manifest.append(
            {
                "shard": shard.shard,
                "split": shard.split,
                "samples": shard.samples,
                "bytes": shard.bytes,
                "sha256": shard.sha256,
                "tokens": shard.tokens,
                "keys": item.keys,
            }
        )
    (root / MANIFEST_NAME).write_text(
        json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    return result


def read_manifest(dataset: Path) -> list[dict[str, Any]]:
    """The ``vlmforge-shards.json`` list of a dataset written by :func:`write_energon_dataset`."""
    data = json.loads((Path(dataset) / MANIFEST_NAME).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{dataset}/{MANIFEST_NAME}: expected a list")
    return data


def expected_keys(dataset: Path) -> dict[str, list[str]]:
    """Split -> keys in write order (from the manifest); the ``expected`` argument of the validator."""
    out: dict[str, list[str]] = {split: [] for split in SPLITS}
    for entry in read_manifest(dataset):
        out.setdefault(entry["split"], []).extend(entry["keys"])
    return out


def dataset_splits(dataset: Path) -> set[str]:
    """Splits with at least one shard in ``.nv-meta/split.yaml``."""
    data = yaml.safe_load((Path(dataset) / ".nv-meta" / "split.yaml").read_text(encoding="utf-8")) or {}
    parts = data.get("split_parts") or {}
    return {split for split, shards in parts.items() if shards}


def _iter_blend(energon_root: Path, subsets: dict[str, float], split: str) -> Iterator[dict[str, Any]]:
    for subset in sorted(subsets):
        if split in dataset_splits(energon_root / subset):
            weight = subsets[subset]
            entry: dict[str, Any] = {"weight": weight} if split == "train" else {}
            entry["path"] = f"./{subset}"
            entry["subflavors"] = {"source": subset}
            yield entry


def write_metadataset(energon_root: Path, subsets: dict[str, float]) -> Path:
    """Write ``energon_root/metadataset.yaml`` (MetadatasetV2) over the per-subset datasets, atomically.

    ``splits.train.blend`` has one entry per subset (weight, ``./<subset>``,
    ``subflavors: {source: <subset>}``); ``splits.val.blend`` lists only subsets whose ``split.yaml`` has a
    non-empty val split (val blends are concatenated by Energon, so weights are omitted there). A subset
    without a train split (all its samples hashed to val) is left out of the train blend, since Energon
    cannot load an empty split. Entries are sorted by subset name; the text is deterministic.
    """
    energon_root = Path(energon_root)
    if not subsets:
        raise ValueError("no subsets for the metadataset")
    for subset, weight in subsets.items():
        if not (energon_root / subset / ".nv-meta" / "split.yaml").is_file():
            raise FileNotFoundError(f"{energon_root / subset} is not a prepared Energon dataset")
        if not weight > 0:
            raise ValueError(f"subset {subset!r}: weight must be positive, got {weight!r}")
    splits: dict[str, Any] = {}
    for split in SPLITS:
        blend = list(_iter_blend(energon_root, subsets, split))
        if blend:
            splits[split] = {"blend": blend}
    if "train" not in splits:
        raise ValueError("no subset has a train split")
    doc = {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": splits}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    target = energon_root / "metadataset.yaml"
    _write_text_atomic(target, text)
    return target
