"""PNG at the chunk level: where a PNG ends, its metadata, and decoding big ones in strips.

Pillow decodes a PNG whole, into memory, and stops after the last row. Here:

- :func:`png_end` finds the end of the image stream (bytes after IEND are cut off a kept original);
- :func:`metadata_png` gathers the chunks that can carry an orientation, wherever they lie, so the
  orientation is known before any pixel is decoded;
- a big 8-bit non-interlaced PNG is decoded strip by strip (:func:`png_strips`), so a 10,000 x 30,000
  infographic never exists in memory at full resolution.

All start from one walk over the chunks (:func:`png_layout`). A kept PNG is verified by Pillow's own full
decode (:mod:`.trainer_decode`): a chunk-level check misses what ``load()`` refuses after the image data
(a truncated text chunk, say).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from PIL import Image
from zlib_ng import zlib_ng as zlib  # the system zlib inflates and checksums PNG data 2.5x slower

from .rejects import Reject, short_detail

__all__ = [
    "STRIP_BYTES",
    "PngLayout",
    "metadata_png",
    "png_end",
    "png_layout",
    "png_strips",
]

#: Raw (filtered) bytes of one strip; also the slack inflated past the rows to reach the checksum.
STRIP_BYTES = 4 << 20
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_METADATA_CHUNKS = frozenset({b"eXIf", b"tEXt", b"zTXt", b"iTXt"})
#: zlib-ng's error class (its stub types it as an instance).
_INFLATE_ERROR = cast("type[Exception]", zlib.error)


def _png_chunks(data: bytes) -> list[tuple[bytes, int, int]]:
    """(type, payload offset, payload length) of every complete chunk, stopping after IEND."""
    chunks: list[tuple[bytes, int, int]] = []
    i, n = 8, len(data)
    while i + 12 <= n:
        length = int.from_bytes(data[i : i + 4], "big")
        kind = bytes(data[i + 4 : i + 8])
        if i + 12 + length > n:
            # a chunk cut short (truncated file): keep what is there of an IDAT, stop
            if kind == b"IDAT":
                chunks.append((kind, i + 8, n - i - 8))
            break
        chunks.append((kind, i + 8, length))
        i += 12 + length
        if kind == b"IEND":
            break
    return chunks


def png_end(data: bytes) -> int | None:
    """Offset just past the IEND chunk (None when the file has none)."""
    chunks = _png_chunks(data)
    if chunks and chunks[-1][0] == b"IEND":
        return chunks[-1][1] + chunks[-1][2] + 4
    return None


@dataclass(frozen=True)
class PngLayout:
    width: int
    height: int
    depth: int
    color_type: int
    interlaced: bool
    idat: tuple[tuple[int, int], ...]  # (offset, length) of every IDAT payload, in order
    ancillary: bytes  # PLTE and tRNS chunks, verbatim (copied into every strip)
    exif: bytes | None
    #: IHDR's payload and the chunks that can carry an orientation (eXIf, tEXt, zTXt, iTXt), wherever they
    #: are, as (type, payload) in file order: see :func:`metadata_png`
    ihdr: bytes = b""
    metadata: tuple[tuple[bytes, bytes], ...] = ()

    @property
    def row_bytes(self) -> int:
        return (self.width * _PNG_CHANNELS[self.color_type] * self.depth + 7) // 8

    @property
    def strippable(self) -> bool:
        """8-bit and not interlaced: rows map 1:1 to Pillow modes, so strips can be decoded alone."""
        return self.depth == 8 and not self.interlaced


def png_layout(data: bytes) -> PngLayout | None:
    """Geometry and chunk positions of a PNG, from one walk over its chunks (None when IHDR is unusable)."""
    chunks = _png_chunks(data)
    if not chunks or chunks[0][0] != b"IHDR" or chunks[0][2] != 13:
        return None
    off = chunks[0][1]
    width, height = int.from_bytes(data[off : off + 4], "big"), int.from_bytes(data[off + 4 : off + 8], "big")
    depth, color_type, interlace = data[off + 8], data[off + 9], data[off + 12]
    if depth not in (1, 2, 4, 8, 16) or color_type not in _PNG_CHANNELS or width <= 0 or height <= 0:
        return None
    ancillary = b"".join(
        data[o - 8 : o + n + 4]
        for kind, o, n in chunks
        if kind in (b"PLTE", b"tRNS") and o + n + 4 <= len(data)
    )
    exif = next((bytes(data[o : o + n]) for kind, o, n in chunks if kind == b"eXIf"), None)
    idat = tuple((o, n) for kind, o, n in chunks if kind == b"IDAT")
    metadata = tuple((kind, bytes(data[o : o + n])) for kind, o, n in chunks if kind in _METADATA_CHUNKS)
    ihdr = bytes(data[off : off + 13])
    return PngLayout(width, height, depth, color_type, interlace != 0, idat, ancillary, exif, ihdr, metadata)


def metadata_png(layout: PngLayout) -> bytes:
    """A pixel-less PNG holding the IHDR and every metadata chunk of the original, in order, with fresh
    checksums (Pillow does not check them after the image data either). Opening it gives Pillow's own view
    of the metadata a full ``load()`` of the original would collect (eXIf, XMP in iTXt, ImageMagick's
    ``Raw profile type exif``), without decoding a pixel."""
    body = b"".join(_png_chunk(kind, payload) for kind, payload in layout.metadata)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", layout.ihdr) + body + _png_chunk(b"IEND", b"")


def _bad_data(exc: Exception) -> Reject:
    return Reject("decode_error", short_detail(f"PNG data: {exc}"))


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(body, zlib.crc32(kind)).to_bytes(4, "big")


def _stored_zlib(body: bytes) -> bytes:
    """``body`` as a zlib stream of stored (uncompressed) deflate blocks: one copy, no compression work."""
    view = memoryview(body)
    parts: list[bytes | memoryview] = [b"\x78\x01"]
    for start in range(0, len(body), 0xFFFF):
        block = view[start : start + 0xFFFF]
        final = start + 0xFFFF >= len(body)
        parts += [struct.pack("<BHH", final, len(block), len(block) ^ 0xFFFF), block]
    if not body:
        parts.append(b"\x01\x00\x00\xff\xff")
    parts.append(zlib.adler32(body).to_bytes(4, "big"))
    return b"".join(parts)


class _StripDecoder:
    """Decodes runs of filtered rows, top to bottom, each wrapped in a small PNG (same IHDR fields and
    palette, the previous strip's last row prepended unfiltered so the row filters resolve)."""

    def __init__(self, layout: PngLayout) -> None:
        self.layout = layout
        self.prev_raw: bytes | None = None

    def _mini_png(self, filtered: bytes | bytearray, total: int) -> bytes:
        layout = self.layout
        body = b"\x00" + self.prev_raw + filtered if self.prev_raw is not None else bytes(filtered)
        ihdr = struct.pack(">IIBBBBB", layout.width, total, 8, layout.color_type, 0, 0, 0)
        idat = _stored_zlib(body)
        return b"".join(
            (
                b"\x89PNG\r\n\x1a\n",
                _png_chunk(b"IHDR", ihdr),
                layout.ancillary,
                len(idat).to_bytes(4, "big"),
                b"IDAT",
                idat,
                zlib.crc32(idat, zlib.crc32(b"IDAT")).to_bytes(4, "big"),
                _png_chunk(b"IEND", b""),
            )
        )

    def decode(self, filtered: bytes | bytearray, n_rows: int) -> Image.Image:
        width = self.layout.width
        total = n_rows + (self.prev_raw is not None)
        with Image.open(io.BytesIO(self._mini_png(filtered, total)), formats=("PNG",)) as im:
            im.load()
            out = im.crop((0, 1, width, total)) if self.prev_raw is not None else im.copy()
        self.prev_raw = out.crop((0, n_rows - 1, width, n_rows)).tobytes()
        return out


def png_strips(data: bytes, layout: PngLayout, row_multiple: int = 1) -> Iterator[Image.Image]:
    """Decode the PNG strip by strip, top to bottom (every row is decoded: this is the full verification).

    The zlib stream is inflated incrementally; strips hold a multiple of ``row_multiple`` rows (all but the
    last)."""
    stride = 1 + layout.row_bytes
    rows = max(1, STRIP_BYTES // stride // row_multiple) * row_multiple  # every strip but the last
    want = rows * stride
    need = layout.height * stride
    decoder = _StripDecoder(layout)
    inflater = zlib.decompressobj()
    pending = bytearray()
    done = 0

    def short() -> int:  # filtered bytes still missing before every row is in
        return need - done * stride - len(pending)

    try:
        for offset, length in layout.idat:
            buf: bytes | memoryview = memoryview(data)[offset : offset + length]
            # Stops once every row is in: data past the rows is never inflated (a small IDAT can inflate to
            # gigabytes of extra bytes; asking for them byte by byte would take hours).
            while buf and not inflater.eof and short() > 0:
                pending += inflater.decompress(buf, max(min(want - len(pending), short()), 1))
                buf = inflater.unconsumed_tail
                while len(pending) >= want and done + rows < layout.height:
                    yield decoder.decode(pending[:want], rows)
                    del pending[:want]
                    done += rows
            if inflater.eof or short() <= 0:
                break
    except _INFLATE_ERROR as exc:
        raise _bad_data(exc) from exc
    left = layout.height - done
    if len(pending) < left * stride:
        got = done + len(pending) // stride
        raise Reject("truncated", f"PNG data ends after {min(got, layout.height)} of {layout.height} rows")
    yield decoder.decode(pending[: left * stride], left)
