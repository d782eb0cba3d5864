"""Write one Megatron-Energon WebDataset per subset (deterministic tars + Energon's own prepare).

Layout of a published dataset ``dest`` (see docs energon-format.md §1, §11)::

    dest/
    ├── train-<subset>-000000.tar (+ .tar.idx)     # uncompressed, deterministic GNU tars
    ├── val-<subset>-000000.tar   (+ .tar.idx)     # only when the val split is non-empty
    ├── vlmforge-shards.json                      # [{shard, split, samples, bytes, sha256, keys}]
    └── .nv-meta/{.info.json, split.yaml, index.sqlite, index.uuid, dataset.yaml}

Choices:

* **Empty splits are omitted from ``split.yaml``** (only split patterns matching >= 1 shard are passed to
  ``prepare_dataset``). Energon raises ``EmptyDatasetError`` for a split with an empty shard list and an
  ``AssertionError("Invalid split part")`` for a missing one, so callers must not load a missing
  split: :func:`write_metadataset` lists a subset under ``val`` (or ``train``) only if its ``split.yaml``
  has that split.
* ``dataset.yaml`` is the crude form (``CrudeWebdataset``), loadable with only megatron-energon installed;
  cook with :mod:`vlmforge.energon`.
* Tars are built with :mod:`tarfile` in GNU format (long names via ``././@LongLink``, never pax headers),
  members ``<key>.json`` then the media parts in the given order, ``mtime=0``, ``uid=gid=0``, empty
  user/group names, mode ``0o644``; the bytes depend only on the samples, so a rewrite gives
  byte-identical shards.
* Everything is built in ``dest.parent/.<dest.name>.staging`` and published with two renames; an interrupted
  write leaves only that hidden folder, which the next call wipes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

__all__ = [
    "DATASET_YAML",
    "MANIFEST_NAME",
    "DatasetResult",
    "DuplicateKeyError",
    "EnergonPrepareError",
    "ShardInfo",
    "ShardSample",
    "expected_keys",
    "read_manifest",
    "sanitize_key",
    "split_for_key",
    "write_energon_dataset",
    "write_metadataset",
]

Split = Literal["train", "val"]
SPLITS: tuple[Split, ...] = ("train", "val")
MANIFEST_NAME = "vlmforge-shards.json"
DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
_TAR_FORMAT = tarfile.GNU_FORMAT
_BLOCK = tarfile.BLOCKSIZE  # 512
_LENGTH_NAME = 100  # tarfile.LENGTH_NAME: longer names need a ././@LongLink member in GNU format
_KEY_RE = re.compile(r"[^A-Za-z0-9_-]+")


class DuplicateKeyError(ValueError):
    """A sample key occurs twice in one dataset (Energon requires dataset-wide unique keys)."""


class EnergonPrepareError(RuntimeError):
    """megatron-energon's prepare failed (it calls ``sys.exit`` on duplicate keys) or disagrees with us."""


@dataclass(frozen=True)
class ShardSample:
    """One sample to write. ``key`` must already be sanitised (no dots); ``media`` parts are (name, bytes)."""

    key: str
    split: Split
    json: dict[str, Any]
    media: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class ShardInfo:
    shard: str
    split: Split
    samples: int
    bytes: int
    sha256: str


@dataclass
class DatasetResult:
    path: Path
    shards: list[ShardInfo] = field(default_factory=list)
    samples: int = 0

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


def _validate_sample(sample: ShardSample) -> None:
    if not sample.key or "." in sample.key or "/" in sample.key:
        raise ValueError(f"invalid sample key {sample.key!r}: must be non-empty without '.' or '/'")
    if sample.split not in SPLITS:
        raise ValueError(f"sample {sample.key!r}: invalid split {sample.split!r}")
    seen = {"json"}
    for name, data in sample.media:
        if not name or "/" in name or name in seen:
            raise ValueError(f"sample {sample.key!r}: invalid or repeated part name {name!r}")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"sample {sample.key!r}: part {name!r} is not bytes")
        seen.add(name)


def _member_bytes(name: str, size: int) -> int:
    """Bytes a regular member occupies in a GNU tar (header, optional long-name record, padded data)."""
    total = _BLOCK + -(-size // _BLOCK) * _BLOCK
    encoded = len(name.encode("utf-8"))
    if encoded >= _LENGTH_NAME:
        total += _BLOCK + -(-(encoded + 1) // _BLOCK) * _BLOCK
    return total


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


class _ShardWriter:
    """Writes ``{split}-{subset}-{n:06d}.tar`` shards for one split, rolling by bytes and sample count."""

    def __init__(self, root: Path, split: Split, subset: str, max_bytes: int, max_samples: int) -> None:
        self.root, self.split, self.subset = root, split, subset
        self.max_bytes, self.max_samples = max_bytes, max_samples
        self.index = 0
        self.tar: tarfile.TarFile | None = None
        self.name = ""
        self.count = 0
        self.size = 0
        self.done: list[tuple[str, list[tuple[str, list[str]]]]] = []  # (shard, [(key, member names)])
        self._members: list[tuple[str, list[str]]] = []

    def write(self, key: str, members: list[tuple[str, bytes]]) -> None:
        sample_bytes = sum(_member_bytes(name, len(data)) for name, data in members)
        # + the 2-block end-of-archive marker; tarfile also pads the file to a 10 KiB record, so a shard can
        # exceed max_bytes by < 10 KiB (and a single sample larger than max_bytes gets a shard of its own).
        if self.tar is not None and (
            self.count >= self.max_samples or self.size + sample_bytes + 2 * _BLOCK > self.max_bytes
        ):
            self.close()
        if self.tar is None:
            self.name = f"{self.split}-{self.subset}-{self.index:06d}.tar"
            self.index += 1
            self.tar = tarfile.open(self.root / self.name, "w", format=_TAR_FORMAT)  # noqa: SIM115
            self.count = self.size = 0
            self._members = []
        for name, data in members:
            self.tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))
        self.count += 1
        self.size += sample_bytes
        self._members.append((key, [name for name, _ in members]))

    def close(self) -> None:
        if self.tar is not None:
            self.tar.close()
            self.done.append((self.name, self._members))
            self.tar = None
            self._members = []


def _check_tar(path: Path, expected: list[tuple[str, list[str]]]) -> None:
    """Re-open a written shard and compare its members with what was written."""
    names: list[str] = []
    with tarfile.open(path, "r:") as tar:
        for member in tar:
            if not member.isreg():
                raise EnergonPrepareError(f"{path.name}: unexpected non-file member {member.name!r}")
            names.append(member.name)
    wanted = [name for _key, parts in expected for name in parts]
    if names != wanted:
        raise EnergonPrepareError(
            f"{path.name}: re-read {len(names)} members, wrote {len(wanted)} (first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(names, wanted, strict=False)) if a != b), len(names))})"
        )
    keys: list[str] = []
    for name in names:
        key = name.split(".", 1)[0]
        if not keys or keys[-1] != key:
            keys.append(key)
    if keys != [key for key, _parts in expected]:
        raise EnergonPrepareError(f"{path.name}: re-read {len(keys)} samples, wrote {len(expected)}")


def _sha256_file(path: Path) -> str:
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


def _run_prepare(root: Path, tar_names: list[str], patterns: Sequence[tuple[str, str]]) -> None:
    from megatron.energon import BaseWebdatasetFactory

    try:
        BaseWebdatasetFactory.prepare_dataset(
            root, tar_names, split_parts_patterns=list(patterns), shuffle_seed=None, workers=1
        )
    except SystemExit as exc:  # energon calls sys.exit(1) on duplicate keys
        raise EnergonPrepareError(
            f"megatron-energon prepare exited with status {exc.code} for {root}"
        ) from exc
    except AssertionError as exc:  # e.g. "Shard X has no samples."
        raise EnergonPrepareError(f"megatron-energon prepare failed for {root}: {exc}") from exc


def write_energon_dataset(
    samples: Iterable[ShardSample],
    dest: Path,
    *,
    subset: str,
    shard_max_bytes: int = 1_000_000_000,
    shard_max_samples: int = 10_000,
) -> DatasetResult:
    """Write ``samples`` as a prepared Energon dataset at ``dest`` (replacing it atomically).

    Raises :class:`DuplicateKeyError` on a repeated key, :class:`ValueError` on an invalid sample or an
    empty input (an Energon dataset needs at least one shard), :class:`EnergonPrepareError` if Energon's
    prepare step fails or its counts disagree with what was written.
    """
    if not subset or _KEY_RE.search(subset):
        raise ValueError(f"invalid subset name {subset!r}")
    if shard_max_samples < 1 or shard_max_bytes < 1:
        raise ValueError("shard_max_samples and shard_max_bytes must be positive")
    dest = Path(dest)
    staging = dest.parent / f".{dest.name}.staging"
    old = dest.parent / f".{dest.name}.old"
    dest.parent.mkdir(parents=True, exist_ok=True)
    _remove(staging)
    staging.mkdir()
    try:
        result = _build(samples, staging, subset, shard_max_bytes, shard_max_samples)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

    # Publish: dest -> .old, staging -> dest, drop .old.
    _remove(old)
    if dest.exists() or dest.is_symlink():
        os.replace(dest, old)
    os.replace(staging, dest)
    _remove(old)
    result.path = dest
    return result


def _build(
    samples: Iterable[ShardSample], root: Path, subset: str, max_bytes: int, max_samples: int
) -> DatasetResult:
    writers = {split: _ShardWriter(root, split, subset, max_bytes, max_samples) for split in SPLITS}
    seen: set[str] = set()
    try:
        for sample in samples:
            _validate_sample(sample)
            if sample.key in seen:
                raise DuplicateKeyError(f"duplicate sample key {sample.key!r} in subset {subset!r}")
            seen.add(sample.key)
            members = [(f"{sample.key}.json", _encode_json(sample.json))]
            members += [(f"{sample.key}.{name}", bytes(data)) for name, data in sample.media]
            writers[sample.split].write(sample.key, members)
    finally:
        for writer in writers.values():
            writer.close()
    if not seen:
        raise ValueError(f"subset {subset!r} has no samples; an Energon dataset needs at least one shard")

    written = [(split, name, members) for split in SPLITS for name, members in writers[split].done]
    tar_names = [name for _split, name, _members in written]
    patterns = [(split, rf"{split}-.*") for split in SPLITS if writers[split].done]
    _run_prepare(root, tar_names, patterns)
    meta = root / ".nv-meta"
    (meta / "dataset.yaml").write_text(DATASET_YAML, encoding="utf-8")

    info = json.loads((meta / ".info.json").read_text(encoding="utf-8"))
    shard_counts: dict[str, int] = info.get("shard_counts", {})
    result = DatasetResult(path=root)
    manifest: list[dict[str, Any]] = []
    for split, name, shard_members in written:
        path = root / name
        _check_tar(path, shard_members)
        if shard_counts.get(name) != len(shard_members):
            raise EnergonPrepareError(
                f"{name}: energon counted {shard_counts.get(name)} samples, {len(shard_members)} were written"
            )
        shard = ShardInfo(
            shard=name,
            split=split,
            samples=len(shard_members),
            bytes=path.stat().st_size,
            sha256=_sha256_file(path),
        )
        result.shards.append(shard)
        result.samples += shard.samples
        manifest.append(
            {
                "shard": shard.shard,
                "split": shard.split,
                "samples": shard.samples,
                "bytes": shard.bytes,
                "sha256": shard.sha256,
                "keys": [key for key, _parts in shard_members],
            }
        )
    if set(shard_counts) != set(tar_names):
        raise EnergonPrepareError(f"energon indexed {sorted(shard_counts)}, expected {tar_names}")
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


def _dataset_splits(dataset: Path) -> set[str]:
    """Splits with at least one shard in ``.nv-meta/split.yaml``."""
    data = yaml.safe_load((dataset / ".nv-meta" / "split.yaml").read_text(encoding="utf-8")) or {}
    parts = data.get("split_parts") or {}
    return {split for split, shards in parts.items() if shards}


def _iter_blend(energon_root: Path, subsets: dict[str, float], split: str) -> Iterator[dict[str, Any]]:
    for subset in sorted(subsets):
        if split in _dataset_splits(energon_root / subset):
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
    fd, tmp = tempfile.mkstemp(prefix=".metadataset.", suffix=".yaml.tmp", dir=energon_root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
