"""The member table of a tar read in place: header after header by seeking, never the members' bytes, each
member's claimed size checked against the file's real size.

A tar header says how many bytes its member holds, and nothing but the header says so: a 4 KB tar can claim
a 100 GB member (a read of the claimed size is a ``MemoryError``), or 2**60 bytes (stream-mode ``tarfile``
skips the claim block by block, for ever). Here the next header is found by seeking to the claimed end, so a
claim costs nothing to pass; a regular member whose ``offset + size`` does not fit the file is reported as
such (:func:`claims_past_end`: the caller rejects it as ``truncated``) and ends the walk, as no header can
follow it. Headers go through :class:`~.tar_format.SafeTarInfo` (bounded extended headers). With a
``deadline`` (``time.monotonic()``) the walk stops there with :class:`IndexDeadline`, so a batch deadline
covers indexing too.
"""

from __future__ import annotations

import tarfile
import time
from collections.abc import Iterator
from typing import Any

from .tar_format import SafeTarInfo


class IndexDeadline(Exception):
    """The deadline came before the tar's last header was read (``members`` were read before it)."""

    def __init__(self, members: int) -> None:
        super().__init__(f"deadline reached after {members} member header(s)")
        self.members = members


def real_size(fileobj: Any) -> int:
    """The size of an open, seekable file (its position is kept)."""
    here = fileobj.tell()
    try:
        return int(fileobj.seek(0, 2))
    finally:
        fileobj.seek(here)


def claims_past_end(member: tarfile.TarInfo, size: int) -> bool:
    """A regular member whose claimed bytes (``offset_data + size``) do not fit a file of ``size`` bytes."""
    return (
        member.isreg() and member.type != tarfile.GNUTYPE_SPARSE and member.offset_data + member.size > size
    )


def past_end_text(member: tarfile.TarInfo, size: int, tar_name: str) -> str:
    """The reason of a member :func:`claims_past_end` finds, naming the claim and what the tar holds."""
    return (
        f"tar member {member.name} claims {member.size} bytes at offset {member.offset_data}, "
        f"but {tar_name} holds {size} bytes"
    )


def seek_members(fileobj: Any, size: int, *, deadline: float | None = None) -> Iterator[tarfile.TarInfo]:
    """Every member header of the uncompressed tar ``fileobj`` (``size`` bytes), in order, read by seeking.
    Stops after a member that :func:`claims_past_end` or leaves no room for another header. Raises
    ``tarfile.ReadError`` (not a tar, a damaged header) and :class:`IndexDeadline`."""
    if deadline is not None and time.monotonic() >= deadline:
        raise IndexDeadline(0)
    tf = tarfile.open(fileobj=fileobj, mode="r:", tarinfo=SafeTarInfo)  # noqa: SIM115 - closed below
    seen = 0
    try:
        while True:
            if seen and deadline is not None and time.monotonic() >= deadline:
                raise IndexDeadline(seen)
            member = tf.next()
            if member is None:
                return
            tf.members.clear()  # type: ignore[attr-defined]  # tarfile keeps every header; we need none
            seen += 1
            yield member
            if claims_past_end(member, size) or tf.offset + tarfile.BLOCKSIZE > size:
                return
    finally:
        tf.close()
