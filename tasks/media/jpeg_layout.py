"""What a JPEG's markers say about how libjpeg will decode it: :func:`jpeg_layout`.

A walk over the marker segments (the entropy-coded data between them is skipped, never decoded): the frame
type and precision, the components, the JFIF, Adobe and ICC markers, and for progressive files which
coefficients every component receives at full precision. Pure, bytes in; None for anything it cannot walk
to the end of the first scan (the caller then leaves the file to Pillow).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["JpegLayout", "jpeg_layout"]

#: SOF markers: C0-CF but DHT (C4), JPG (C8) and DAC (CC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: markers without a length: TEM, RST0-7 (SOI and EOI are handled where they may occur)
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD8)})
#: in entropy-coded data 0xFF is followed by 0x00 (a stuffed byte), an RSTn or a fill 0xFF; anything else
#: is the next marker
_NEXT_MARKER = re.compile(rb"\xff(?![\x00\xd0-\xd7\xff])")
_ALL_COEFFICIENTS = (1 << 64) - 1


@dataclass(frozen=True)
class JpegLayout:
    """The marker facts of one JPEG (see the module docstring)."""

    #: the SOF marker's second byte: 0xC0 baseline, 0xC1 extended, 0xC2 progressive (Huffman), ...
    sof: int
    precision: int
    width: int
    height: int
    #: component ids in frame order
    component_ids: tuple[int, ...]
    jfif: bool
    adobe: bool
    icc: bool
    #: progressive files only: every component receives every coefficient at full precision (a scan with
    #: Al = 0 covers it); libjpeg then has no block smoothing to do. Always True for sequential files.
    fully_refined: bool


def jpeg_layout(data: bytes) -> JpegLayout | None:
    """The layout of ``data``, or None when its markers do not walk (no SOI, a cut segment, no SOF or SOS,
    two SOFs, a scan naming an unknown component)."""
    if data[:2] != b"\xff\xd8":
        return None
    walk = _Walk()
    pos = 2
    while True:
        marker_at = _marker_at(data, pos)
        if marker_at is None:
            return None
        marker, pos = marker_at
        if marker in _STANDALONE:
            continue
        if marker == 0xD9:  # EOI: a progressive file's scans are all seen
            return walk.layout() if walk.frame is not None and walk.scans else None
        if marker == 0xD8 or pos + 2 > len(data):
            return None
        end = pos + int.from_bytes(data[pos : pos + 2], "big")
        if end > len(data) or end < pos + 2:
            return None
        if not walk.segment(marker, data[pos + 2 : end]):
            return None
        pos = end
        if marker == 0xDA:
            if walk.frame is not None and walk.frame[0] != 0xC2:
                return walk.layout()  # sequential: nothing after the first scan changes the decode
            found = _NEXT_MARKER.search(data, pos)
            if found is None:
                return None
            pos = found.start()


def _marker_at(data: bytes, pos: int) -> tuple[int, int] | None:
    """(marker, position after it) for the marker at ``pos`` (fill bytes 0xFF skipped), else None."""
    if pos >= len(data) or data[pos] != 0xFF:
        return None
    while pos < len(data) and data[pos] == 0xFF:
        pos += 1
    if pos >= len(data) or data[pos] == 0x00:
        return None
    return data[pos], pos + 1


class _Walk:
    """What the segments seen so far say."""

    def __init__(self) -> None:
        #: (sof, precision, width, height, component ids)
        self.frame: tuple[int, int, int, int, tuple[int, ...]] | None = None
        self.jfif = self.adobe = self.icc = False
        self.scans = 0
        #: per component id: a bit per coefficient received at full precision
        self.refined: dict[int, int] = {}

    def segment(self, marker: int, body: bytes) -> bool:
        """Take one marker segment's body in; False when it makes the file unwalkable."""
        if marker == 0xE0 and body.startswith(b"JFIF\x00"):
            self.jfif = True
        elif marker == 0xE2 and body.startswith(b"ICC_PROFILE\x00"):
            self.icc = True
        elif marker == 0xEE and body.startswith(b"Adobe"):
            self.adobe = True
        elif marker in _SOF:
            return self._frame(marker, body)
        elif marker == 0xDA:
            return self._scan(body)
        return True

    def _frame(self, marker: int, body: bytes) -> bool:
        if self.frame is not None or len(body) < 6:
            return False
        count = body[5]
        if len(body) < 6 + 3 * count:
            return False
        ids = tuple(body[6 + 3 * i] for i in range(count))
        height, width = int.from_bytes(body[1:3], "big"), int.from_bytes(body[3:5], "big")
        self.frame = (marker, body[0], width, height, ids)
        self.refined = dict.fromkeys(ids, 0)
        return True

    def _scan(self, body: bytes) -> bool:
        if self.frame is None or not body:
            return False
        count = body[0]
        if len(body) < 1 + 2 * count + 3:
            return False
        ids = [body[1 + 2 * i] for i in range(count)]
        start, end, approx = body[1 + 2 * count : 4 + 2 * count]
        if any(i not in self.refined for i in ids):
            return False
        if approx & 0x0F == 0 and start <= end <= 63:  # Al = 0: these coefficients are now complete
            band = ((1 << (end + 1)) - 1) ^ ((1 << start) - 1)
            for i in ids:
                self.refined[i] |= band
        self.scans += 1
        return True

    def layout(self) -> JpegLayout:
        assert self.frame is not None
        sof, precision, width, height, ids = self.frame
        fully_refined = sof != 0xC2 or all(bits == _ALL_COEFFICIENTS for bits in self.refined.values())
        return JpegLayout(
            sof, precision, width, height, ids, self.jfif, self.adobe, self.icc, fully_refined=fully_refined
        )
