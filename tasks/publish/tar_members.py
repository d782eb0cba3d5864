"""A sample made ready for a shard: checked, encoded by its format, with its tar headers, size and identity.

Nothing here reads media bytes: a :class:`Prepared` sample knows how many bytes it adds to a shard (so the
writer can roll shards over before writing) and a digest of everything that decides its bytes (keys, record
bytes, media names, sizes and sha256), which the resume journal compares to keep a finished shard.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass

from ...schemas.sample_keys import SPLITS
from .formats.sample_format import SampleFormat, TarParts
from .samples import MediaPart, ShardSample

__all__ = ["BLOCK", "Prepared", "padded", "prepare_sample", "tar_header"]

BLOCK = tarfile.BLOCKSIZE  # 512


@dataclass
class Prepared:
    """A validated sample with its tar headers, byte count and identity digest (no media bytes loaded)."""

    key: str
    record: bytes
    parts: list[MediaPart]
    #: the tar member names (``<key>.<record>``, then each part's), and their headers, in that order
    names: list[str]
    headers: list[bytes]
    nbytes: int
    digest: bytes
    tokens: int | None


def tar_header(name: str, size: int) -> bytes:
    """The GNU tar header of a regular file: mtime 0, uid/gid 0, no user/group names, mode 0o644.

    Byte-identical to ``tarfile``'s (``TarInfo.tobuf(GNU_FORMAT)``); the common case (a name of at most
    100 bytes, an octal size) is built directly, the rest (``././@LongLink``, base-256 sizes) by tarfile."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > _NAME_FIELD or not 0 <= size < _MAX_OCTAL_SIZE:
        return _tarfile_header(name, size)
    size_field = b"%011o\0" % size
    # tarfile's checksum: the unsigned byte sum with the checksum field as 8 spaces, "%06o\0" then a space;
    # only the name and the size vary, so only they are summed (a 512-byte sum per member was 15% of publish)
    chksum = b"%06o\0 " % (_FIXED_SUM + sum(raw) + sum(size_field))
    return b"".join((raw, bytes(_NAME_FIELD - len(raw)), _MODE_IDS, size_field, _MTIME, chksum, _TAIL))


_NAME_FIELD = 100
_MAX_OCTAL_SIZE = 8**11
_MODE_IDS = b"0000644\0" + b"0000000\0" * 2  # mode, uid, gid
_MTIME = b"00000000000\0"  # mtime 0
# type, linkname, GNU magic, uname, gname, devmajor, devminor, prefix, block padding
_TAIL = tarfile.REGTYPE + bytes(100) + tarfile.GNU_MAGIC + bytes(32 + 32 + 8 + 8 + 155 + 12)
_FIXED_SUM = sum(_MODE_IDS) + sum(_MTIME) + sum(b" " * 8) + sum(_TAIL)


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def padded(size: int) -> int:
    """``size`` rounded up to whole tar blocks."""
    return -(-size // BLOCK) * BLOCK


def prepare_sample(sample: ShardSample, fmt: SampleFormat) -> Prepared:
    """Check ``sample``, encode it with ``fmt`` and compute what the shard writer needs to place it."""
    _check_key_and_split(sample)
    encoded = fmt.encode(sample.json, _media_parts(sample), sample.text)
    _check_part_names(sample.key, encoded)
    names = [f"{sample.key}.{encoded.record_name}", *(f"{sample.key}.{part.name}" for part in encoded.media)]
    sizes = [len(encoded.record), *(part.size for part in encoded.media)]
    headers = [tar_header(name, size) for name, size in zip(names, sizes, strict=True)]
    nbytes = sum(map(len, headers)) + padded(len(encoded.record)) + sum(padded(p.size) for p in encoded.media)
    return Prepared(
        key=sample.key,
        record=encoded.record,
        parts=list(encoded.media),
        names=names,
        headers=headers,
        nbytes=nbytes,
        digest=_digest(sample.key, encoded),
        tokens=_total_tokens(sample),
    )


def _check_key_and_split(sample: ShardSample) -> None:
    key = sample.key
    if not isinstance(key, str) or not key or "." in key or "/" in key:
        raise ValueError(f"invalid sample key {key!r}: must be non-empty without '.' or '/'")
    if sample.split not in SPLITS:
        raise ValueError(f"sample {key!r}: invalid split {sample.split!r}")


def _media_parts(sample: ShardSample) -> tuple[MediaPart, ...]:
    """The sample's media as :class:`MediaPart` (``(name, bytes)`` pairs are wrapped)."""
    parts: list[MediaPart] = []
    for item in sample.media:
        if isinstance(item, MediaPart):
            parts.append(item)
            continue
        name, data = item
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"sample {sample.key!r}: part {name!r} is not bytes")
        parts.append(MediaPart.from_bytes(name, bytes(data)))
    return tuple(parts)


def _check_part_names(key: str, encoded: TarParts) -> None:
    seen = {encoded.record_name}
    for part in encoded.media:
        if not part.name or "/" in part.name or part.name in seen:
            raise ValueError(f"sample {key!r}: invalid or repeated part name {part.name!r}")
        if part.size < 0:
            raise ValueError(f"sample {key!r}: part {part.name!r} has a negative size")
        seen.add(part.name)


def _digest(key: str, encoded: TarParts) -> bytes:
    digest = hashlib.sha256()
    digest.update(f"{key}\0{len(encoded.record)}\0".encode())
    digest.update(encoded.record)
    for part in encoded.media:
        digest.update(f"\0{part.name}\0{part.size}\0{part.sha256}".encode())
    return digest.digest()


def _total_tokens(sample: ShardSample) -> int | None:
    meta = sample.json.get("vlmforge") if isinstance(sample.json, dict) else None
    tokens = meta.get("total_tokens") if isinstance(meta, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None
