"""Keeping an original byte-identical: which images qualify, and where their encoded stream ends.

Re-encoding costs time and quality, so an image already in a trainer-friendly form (JPEG/PNG/WebP, RGB or L,
upright, within the model's pixel range, in the requested format) is written as it came. Only its image
stream is kept: bytes after the end marker (a ZIP or a video glued to a JPEG, a polyglot) are cut off and
the cut is noted, so a shard never carries foreign payload. The end is found by walking the format's own
structure (JPEG markers, PNG chunks, the RIFF size), one function per format in :data:`_ENDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .encode import FMT_TO_EXT, ImageFormat, OutExt
from .png import png_end

__all__ = ["KEEPABLE", "can_keep", "kept_bytes"]

#: Pillow formats kept byte-identical, and their extension.
KEEPABLE: dict[str, OutExt] = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp"}

_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def can_keep(
    src_format: str, mode: str | None, orientation: int, within: bool, image_format: ImageFormat
) -> bool:
    """Whether the original may be written as is (``within``: its pixel count lies in the model's range)."""
    return (
        src_format in KEEPABLE
        and orientation == 1
        and mode in ("RGB", "L")
        and within
        and (image_format == "keep" or FMT_TO_EXT[image_format] == KEEPABLE[src_format])
    )


def _jpeg_end(data: bytes) -> int | None:
    """Offset just past the EOI marker of the first JPEG image in ``data`` (None when the walk fails)."""
    n, i = len(data), 2
    while i + 2 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            return i + 2
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # standalone markers
            i += 2
            continue
        if i + 4 > n:
            return None
        seg = int.from_bytes(data[i + 2 : i + 4], "big")
        if seg < 2:
            return None
        i += 2 + seg
        if marker == 0xDA:  # entropy-coded data runs to the next marker that is not a stuffed 0xFF or RSTn
            match = _JPEG_NEXT_MARKER.search(data, i)
            if match is None:
                return None
            i = match.start()
    return None


def _riff_end(data: bytes) -> int | None:
    size = int.from_bytes(data[4:8], "little") + 8
    return size if size <= len(data) else None


#: Where the image stream ends, per kept format. MPO is left out: the images after the first are part of
#: the format, not foreign payload.
_ENDS: dict[str, Callable[[bytes], int | None]] = {"JPEG": _jpeg_end, "PNG": png_end, "WEBP": _riff_end}


def kept_bytes(src_format: str, data: bytes) -> tuple[bytes, list[str]]:
    """The bytes to keep (``data`` itself when nothing follows the image) and the notes on the cut."""
    find_end = _ENDS.get(src_format)
    end = find_end(data) if find_end is not None else None
    if end is not None and end < len(data):
        return data[:end], [f"trailing_data_stripped:{len(data) - end}"]
    return data, []
