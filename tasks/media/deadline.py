"""A wall-clock limit that holds inside libav, not only in our own loops.

A damaged or hostile video can keep a demuxer busy inside C, where a Python-side check between frames never
runs. libav pulls its data through ``read`` and ``seek`` callbacks when it reads from a Python file object,
so :class:`DeadlineReader` checks the clock there: once the deadline has passed, the next read raises
:class:`VideoTimeout` and libav unwinds (wrapping it, which is why callers also look at an exception's cause).
"""

from __future__ import annotations

import io
import time
from typing import Any

__all__ = ["DeadlineReader", "VideoTimeout"]


class VideoTimeout(Exception):
    """The video's wall-clock limit has passed."""


class DeadlineReader(io.RawIOBase):
    """Read-only in-memory file that raises once the deadline has passed.

    libav pulls data through ``read``/``seek`` callbacks, so this also bounds time spent inside blocking
    demuxer calls, not only the Python loops.
    """

    def __init__(self, data: bytes, deadline: float) -> None:
        super().__init__()
        self._buf = io.BytesIO(data)
        self._deadline = deadline

    def _check(self) -> None:
        if time.monotonic() > self._deadline:
            raise VideoTimeout("wall-clock timeout while reading")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self._check()
        return self._buf.read(size)

    def readinto(self, b: Any) -> int:
        self._check()
        return self._buf.readinto(b)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check()
        return self._buf.seek(offset, whence)

    def tell(self) -> int:
        return self._buf.tell()
