"""Verify and normalise one media object (image or video) referenced by a training record.

Pure functions over bytes; no I/O, no orchestration imports. The pipeline calls :func:`process_image` or
:func:`probe_video` once per referenced file and stores the result (status, reason, sizes, output bytes);
``vlmforge.tasks.media.frames`` builds on :func:`probe_video` to write sampled frames as images.

Images: header-only open first (decompression bombs are refused from the header, before any pixel is
decoded), then a full verification of the encoded data: images that are re-encoded are decoded whole
(``img.load()``); kept JPEGs are decoded at 1/8 DCT scale (every entropy-coded block is still decoded, so
truncation and corrupt data are found as at full scale); kept PNGs have all their compressed data inflated
(checksum included) and every row's filter byte checked (unfiltering is arithmetic that cannot fail). The
displayed size is the size after EXIF orientation (``ImageOps.exif_transpose`` semantics). Files already in
a trainer-friendly form are kept byte-identical (bytes appended after the image's end marker, e.g. a ZIP or
a video glued to a JPEG, are cut off); everything else is re-encoded once, deterministically (no EXIF, ICC,
timestamps), resized with bicubic (what Qwen's processors use) to exactly the model's size. Big JPEGs are
decoded with DCT scaling (``draft``); big 8-bit non-interlaced PNGs are decoded and resized in horizontal
strips, so a 10,000 x 30,000 infographic never exists in memory at full resolution.

Videos: PyAV from memory, metadata without a full decode, then the frames the caller's sampler chooses
are decoded sequentially (stopping after the last needed one) under a wall-clock deadline. A frame size over
the pixel limit is refused from the header, before any frame is decoded.
"""

from __future__ import annotations

import contextlib
import io
import re
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any, Literal, cast

import numpy as np
import pyarrow as pa
from PIL import Image, UnidentifiedImageError
from zlib_ng import zlib_ng as zlib  # the system zlib inflates and checksums PNG data 2.5x slower

try:  # Pillow is normally built with LittleCMS; fall back to dropping profiles if not.
    from PIL import ImageCms

    _SRGB: Any = ImageCms.createProfile("sRGB")
except Exception:  # pragma: no cover - depends on the Pillow build
    ImageCms = None  # type: ignore[assignment]
    _SRGB = None

__all__ = [
    "IMAGE_REASONS",
    "VIDEO_REASONS",
    "ImageResult",
    "SampledFrame",
    "VideoResult",
    "encode_image",
    "process_image",
    "probe_video",
]

ImageFormat = Literal["keep", "jpeg", "webp", "png"]
OutExt = Literal["jpg", "png", "webp"]

IMAGE_REASONS: frozenset[str] = frozenset(
    {
        "zero_size",
        "not_an_image",
        "decompression_bomb",
        "truncated",
        "decode_error",
        "aspect_ratio",
        "too_small",
    }
)
VIDEO_REASONS: frozenset[str] = frozenset(
    {
        "zero_size",
        "not_a_video",
        "no_video_stream",
        "decompression_bomb",
        "video_decode_error",
        "video_timeout",
        "frame_selection",
    }
)

_DETAIL_MAX = 200


def _short(exc: BaseException | str) -> str:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


# --------------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageResult:
    """Outcome of :func:`process_image`.

    ``width``/``height`` are the displayed size (after EXIF orientation; 0 when the header was unreadable);
    ``out_width``/``out_height`` the size of ``out_bytes`` (0 for rejects). ``out_ext``/``out_bytes`` are
    None for rejects.
    """

    status: Literal["ok", "rejected"]
    format: str | None
    mode: str | None
    width: int
    height: int
    reason: str | None = None
    out_width: int = 0
    out_height: int = 0
    out_ext: OutExt | None = None
    out_bytes: bytes | None = None
    kept_original: bool = False
    notes: tuple[str, ...] = ()
    detail: str | None = None


class _Reject(Exception):
    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _RetryRelaxed(Exception):
    """Pillow's own bomb ceiling is below the caller's ``max_image_pixels``: redo with it lifted."""


# Formats Pillow may open. EPS (runs Ghostscript), font/animation oddities and write-only formats are left
# out on purpose: untrusted bytes should only reach well-exercised raster decoders.
_OPEN_FORMATS: tuple[str, ...] = (
    "JPEG",
    "MPO",
    "PNG",
    "WEBP",
    "GIF",
    "BMP",
    "DIB",
    "TIFF",
    "ICO",
    "TGA",
    "QOI",
    "PPM",
    "AVIF",
    "JPEG2000",
    "SGI",
    "PCX",
    "ICNS",
    "DDS",
    "PSD",
)
Image.init()
_OPEN_FORMATS = tuple(f for f in _OPEN_FORMATS if f in Image.OPEN)  # MPO is reached through JPEG's factory
_KEEPABLE = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp"}
_FMT_TO_EXT: dict[str, OutExt] = {"jpeg": "jpg", "png": "png", "webp": "webp"}
_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}
_HIGH_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I", "F"}
# EXIF orientation -> transpose (identical to ImageOps.exif_transpose).
_ORIENT_OPS: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_TRUNCATION_MARKERS = (
    "truncated",
    "broken data stream",
    "unexpected end",
    "premature end",
    "end of file",
    "not enough data",
    "buffer is not large enough",
)
_BOMB_PIXELS = re.compile(r"Image size \((\d+) pixels\)")
_PILLOW_LIMIT_LOCK = threading.Lock()


def _sniff_image_magic(data: bytes) -> str | None:
    """Name of a raster format recognised from its signature (used to refine 'cannot identify')."""
    head = data[:32]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:2] == b"BM":
        return "bmp"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1"):
        return "heif"
    if head[4:8] == b"ftyp" and head[8:12] in (b"avif", b"avis"):
        return "avif"
    if head.startswith(b"\xff\x0a") or head.startswith(b"\x00\x00\x00\x0cJXL \r\n\x87\n"):
        return "jxl"
    return None


def _header_dims(magic: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) straight from the header of simple formats Pillow refuses to open (e.g. 0 px)."""
    if magic == "png" and len(data) >= 24 and data[12:16] == b"IHDR":
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if magic == "gif" and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if magic == "bmp" and len(data) >= 26 and int.from_bytes(data[14:18], "little") >= 40:
        return int.from_bytes(data[18:22], "little", signed=True), int.from_bytes(
            data[22:26], "little", signed=True
        )
    return None


def _classify_decode_error(exc: BaseException) -> _Reject:
    if isinstance(exc, _Reject):
        return exc
    if isinstance(exc, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return _Reject("decompression_bomb", _short(exc))
    text = str(exc).lower()
    if isinstance(exc, EOFError) or any(marker in text for marker in _TRUNCATION_MARKERS):
        return _Reject("truncated", _short(exc))
    return _Reject("decode_error", _short(exc))


def _full_decode(img: Image.Image, relaxed: bool) -> None:
    """Decode every pixel (the verification step); failures become rejects."""
    try:
        img.load()
    except Exception as exc:
        if isinstance(exc, Image.DecompressionBombError) and not relaxed:
            raise _RetryRelaxed from exc
        raise _classify_decode_error(exc) from exc


def _orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(0x0112, 1)
    except Exception:
        return 1
    return value if isinstance(value, int) and value in _ORIENT_OPS else 1


def _is_lossless_webp(data: bytes) -> bool:
    # Simple (VP8L) or extended (VP8X ... VP8L) lossless WebP.
    return data[12:16] == b"VP8L" or (data[12:16] == b"VP8X" and b"VP8L" in data[30:4096])


def _to_8bit_gray(img: Image.Image) -> Image.Image:
    arr = np.asarray(img)
    if img.mode == "F":
        farr = np.nan_to_num(arr.astype(np.float64))
        peak = float(farr.max()) if farr.size else 0.0
        scaled = farr * 255.0 if peak <= 1.0 else farr
        out = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    else:
        iarr = np.clip(arr.astype(np.int64), 0, 65535)
        peak = int(iarr.max()) if iarr.size else 0
        # Scale by the effective bit depth: 10/12-bit sensor or scientific data stored in 16-bit
        # containers would otherwise come out black (>> 8) or, with Pillow's convert("L"), clipped white.
        shift = max(0, peak.bit_length() - 8)
        out = (iarr >> shift).astype(np.uint8)
    return Image.fromarray(out, mode="L")


def _composite_on_white(img: Image.Image) -> Image.Image:
    rgba = img.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba.convert("RGB"), mask=rgba.getchannel("A"))
    return background


def _identity(img: Image.Image) -> Image.Image:
    return img


def _icc_converter(icc: bytes | None, mode: str, notes: list[str]) -> Callable[[Image.Image], Image.Image]:
    """A function converting ``mode`` images from the embedded profile to sRGB (RGB/RGBA/CMYK); the identity
    when the profile is already sRGB, absent, or cannot be applied (then it is dropped, and noted)."""
    if not icc:
        return _identity
    if ImageCms is None or mode not in ("RGB", "RGBA", "CMYK"):
        notes.append("icc_dropped")
        return _identity
    try:
        src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        description = (ImageCms.getProfileDescription(src) or "").strip().lower()
        if description.startswith("srgb") and mode != "CMYK":
            return _identity  # already sRGB: dropping the tag changes nothing
        transform = ImageCms.buildTransform(src, _SRGB, mode, "RGBA" if mode == "RGBA" else "RGB")
    except Exception:
        notes.append("icc_dropped")
        return _identity
    notes.append("icc_converted_to_srgb")

    def convert(img: Image.Image) -> Image.Image:
        converted = ImageCms.applyTransform(img, transform)
        if converted is None:  # pragma: no cover - only with inPlace=True
            raise ValueError("applyTransform returned None")
        return converted

    return convert


def _apply_icc(img: Image.Image, icc: bytes | None, notes: list[str]) -> Image.Image:
    """Convert colour to sRGB using the embedded profile (RGB/RGBA/CMYK); otherwise drop the profile."""
    return _icc_converter(icc, img.mode, notes)(img)


def _normalise_mode(img: Image.Image, notes: list[str]) -> tuple[Image.Image, bool]:
    """Return an RGB or L image and whether the source carried alpha."""
    mode = img.mode
    if mode in ("RGB", "L"):
        return img, False
    if mode == "1":
        return img.convert("L"), False
    if mode in _HIGH_BIT_MODES:
        return _to_8bit_gray(img).convert("RGB"), False
    has_alpha = mode in _ALPHA_MODES or (
        mode == "P"
        and ("transparency" in img.info or (img.palette is not None and img.palette.mode == "RGBA"))
    )
    if has_alpha:
        notes.append("alpha_composited_on_white")
        return _composite_on_white(img), True
    return img.convert("RGB"), False


def _choose_output(
    image_format: ImageFormat, src_format: str, src_mode: str, had_alpha: bool
) -> Literal["jpeg", "png", "webp"]:
    if image_format != "keep":
        return image_format
    if src_format == "WEBP":
        return "webp"
    if had_alpha or src_format == "PNG" or src_mode in ("P", "1"):
        return "png"  # graphics / cut-outs: lossless
    return "jpeg"


def _encode(img: Image.Image, fmt: Literal["jpeg", "png", "webp"], quality: int, lossless: bool) -> bytes:
    img.info = {}  # no EXIF/ICC/XMP/dpi carried over: deterministic, metadata-free output
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    elif fmt == "png":
        img.save(buf, format="PNG", compress_level=6)
    elif lossless:
        img.save(buf, format="WEBP", lossless=True, quality=100, method=4, exact=False)
    else:
        img.save(buf, format="WEBP", quality=quality, method=4)
    return buf.getvalue()


def encode_image(img: Image.Image, fmt: Literal["jpeg", "png", "webp"], quality: int = 92) -> bytes:
    """Encode ``img`` (RGB or L) the way the pipeline writes media: deterministic, no metadata."""
    return _encode(img, fmt, quality, lossless=False)


# ---- end of the encoded image (bytes after it are cut off when the original is kept) --------------------

_JPEG_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


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


def _png_end(data: bytes) -> int | None:
    chunks = _png_chunks(data)
    if chunks and chunks[-1][0] == b"IEND":
        return chunks[-1][1] + chunks[-1][2] + 4
    return None


def _encoded_end(src_format: str, data: bytes) -> int | None:
    """Where the image stream ends, for the formats kept byte-identical (None: unknown, keep everything).

    MPO is left alone: the images after the first are part of the format, not foreign payload."""
    if src_format == "JPEG":
        return _jpeg_end(data)
    if src_format == "PNG":
        return _png_end(data)
    if src_format == "WEBP":
        return _riff_end(data)
    return None


#: zlib-ng's error class (its stub types it as an instance).
_INFLATE_ERROR = cast("type[Exception]", zlib.error)


# ---- big PNGs: decode and resize in horizontal strips ---------------------------------------------------

#: PNGs with at least this many pixels are decoded strip by strip (when the layout allows it).
_STRIP_MIN_PIXELS = 24_000_000
#: Raw (filtered) bytes of one strip.
_STRIP_BYTES = 4 << 20
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
#: Resampling filters offered, and their support in source pixels at scale 1 (Pillow's filter table).
Resample = Literal["bicubic", "lanczos"]
_RESAMPLE: dict[str, Image.Resampling] = {
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_FILTER_SUPPORT = {Image.Resampling.BICUBIC: 2.0, Image.Resampling.LANCZOS: 3.0}
#: Downscales by 2 x this or more first box-reduce by an integer factor that leaves at least this much for the
#: filter (Pillow's ``reducing_gap``): at 3 the result is indistinguishable from the fair resample (Pillow's
#: docs; here: mean error under 0.5 level), and a 50 MP -> 1 MP resize takes a third of the time. Smaller
#: downscales resize exactly as the model's processor does.
_REDUCING_GAP = 3.0


def _reduce_factors(src: tuple[int, int], out: tuple[int, int]) -> tuple[int, int]:
    """Pillow's ``reducing_gap`` factors for ``resize(out)`` of an image of size ``src``."""
    return (max(1, int(src[0] / out[0] / _REDUCING_GAP)), max(1, int(src[1] / out[1] / _REDUCING_GAP)))


#: Resize RGB and L images with torch's antialiased bicubic kernel when torch is installed (it is: Energon
#: needs it). That kernel was written to match Pillow's (the pixels differ by a level at a few places) and is
#: what transformers' fast image processors call; on uint8 it is vectorised, 2x Pillow's here with the copies
#: in and out. It uses torch's intra-op threads (Ray sets OMP_NUM_THREADS to a task's CPUs).
_TORCH_RESIZE = True
_torch_module: Any = None


def _torch() -> Any:
    """torch, imported on first use (False when it is missing)."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
            import torch.nn.functional
        except ImportError:  # pragma: no cover - a dependency of megatron-energon
            _torch_module = False
        else:
            # the tensors below view Pillow's read-only pixel copies and are never written to
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            _torch_module = torch
    return _torch_module


def _pixels(img: Image.Image) -> tuple[np.ndarray, str]:
    """``img``'s pixels as an (h, w, channels) array and the raw mode that reads them back. An RGB image is
    viewed without a copy through Pillow's Arrow export, four bytes a pixel as Pillow stores it, when its
    rows lie in one block (images up to Pillow's block size, 16 MB: about 4 MP); otherwise it is copied."""
    if img.mode == "RGB":
        try:
            view = pa.array(img).flatten().to_numpy(zero_copy_only=True)
        except (ValueError, pa.ArrowException):  # rows spread over several blocks
            pass
        else:
            return view.reshape(img.height, img.width, 4), "RGBX"
        return np.asarray(img), "RGB"
    return np.asarray(img)[..., None], "L"


def _resize(img: Image.Image, size: tuple[int, int], resample: Image.Resampling) -> Image.Image:
    """``img.resize(size, resample)``: Pillow's, with a box pre-reduction for downscales past
    2 x ``_REDUCING_GAP``, or torch's antialiased bicubic for the other RGB and L bicubic resizes."""
    torch: Any = _torch() if _TORCH_RESIZE and resample == Image.Resampling.BICUBIC else False
    if not torch or img.mode not in ("RGB", "L") or _reduce_factors(img.size, size) != (1, 1):
        return img.resize(size, resample, reducing_gap=_REDUCING_GAP)
    pixels, rawmode = _pixels(img)
    channels = pixels.shape[2]
    # channels-last in and out, the layout the vectorised uint8 kernel works in: with four channels it
    # neither unpacks the input nor packs the output, and Pillow reads the result back with one row copy
    out = torch.empty((1, channels, size[1], size[0]), dtype=torch.uint8, memory_format=torch.channels_last)
    torch.ops.aten._upsample_bicubic2d_aa.out(
        torch.from_numpy(pixels).permute(2, 0, 1)[None], [size[1], size[0]], False, None, None, out=out
    )
    return Image.frombytes(img.mode, size, out[0].permute(1, 2, 0).numpy(), "raw", rawmode)


@dataclass(frozen=True)
class _PngLayout:
    width: int
    height: int
    depth: int
    color_type: int
    interlaced: bool
    idat: tuple[tuple[int, int], ...]  # (offset, length) of every IDAT payload, in order
    ancillary: bytes  # PLTE and tRNS chunks, verbatim (copied into every strip)
    exif: bytes | None

    @property
    def row_bytes(self) -> int:
        return (self.width * _PNG_CHANNELS[self.color_type] * self.depth + 7) // 8

    @property
    def strippable(self) -> bool:
        """8-bit and not interlaced: rows map 1:1 to Pillow modes, so strips can be decoded alone."""
        return self.depth == 8 and not self.interlaced


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


def _png_layout(data: bytes) -> _PngLayout | None:
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
    return _PngLayout(width, height, depth, color_type, interlace != 0, idat, ancillary, exif)


def _verify_png_stream(data: bytes, layout: _PngLayout) -> None:
    """Verify a non-interlaced PNG's pixel data without reconstructing pixels: the whole zlib stream is
    inflated (Huffman codes, back-references, block lengths, and the Adler-32 checksum when the stream has
    one) and every row's filter type is checked. Row unfiltering is arithmetic that cannot fail, so this finds
    what a full decode finds (truncation, corrupt data, bad filter bytes) at about a third of its cost, plus
    damage a full decode misses: Pillow stops after the last row and never reads the checksum."""
    stride = 1 + layout.row_bytes
    need = layout.height * stride
    inflater = zlib.decompressobj()
    pos = 0
    try:
        for offset, length in layout.idat:
            buf: bytes | memoryview = memoryview(data)[offset : offset + length]
            # Data past the rows (plus a strip of slack to reach the checksum) is not inflated: a small IDAT
            # can inflate to gigabytes of extra bytes, which decoders ignore anyway.
            while buf and not inflater.eof and pos <= need + _STRIP_BYTES:
                out = inflater.decompress(buf, _STRIP_BYTES)
                buf = inflater.unconsumed_tail
                if out and pos < need:
                    rows = np.frombuffer(out, np.uint8, count=min(len(out), need - pos))
                    filters = rows[(-pos) % stride :: stride]
                    if filters.size and int(filters.max()) > 4:
                        row = (pos + (-pos) % stride + int(np.argmax(filters > 4)) * stride) // stride
                        raise _Reject("decode_error", f"PNG row {row} has filter type {int(filters.max())}")
                pos += len(out)
            if inflater.eof or pos > need + _STRIP_BYTES:
                break
    except _INFLATE_ERROR as exc:
        raise _Reject("decode_error", _short(f"PNG data: {exc}")) from exc
    if pos < need:
        raise _Reject("truncated", f"PNG data ends after {pos // stride} of {layout.height} rows")


def _png_orientation(layout: _PngLayout) -> int:
    if not layout.exif:
        return 1
    exif = Image.Exif()
    try:
        exif.load(layout.exif)
        value = exif.get(0x0112, 1)
    except Exception:
        return 1
    return value if isinstance(value, int) and value in _ORIENT_OPS else 1


def _png_strips(data: bytes, layout: _PngLayout, row_multiple: int = 1) -> Iterator[Image.Image]:
    """Decode the PNG strip by strip, top to bottom (every row is decoded: this is the full verification).

    The zlib stream is inflated incrementally; each strip's filtered rows are wrapped in a small PNG (same
    IHDR fields and palette, the previous strip's last row prepended unfiltered so the row filters resolve)
    and decoded by Pillow."""
    stride = 1 + layout.row_bytes
    rows = max(1, _STRIP_BYTES // stride // row_multiple) * row_multiple  # every strip but the last
    want = rows * stride
    inflater = zlib.decompressobj()
    pending = bytearray()
    prev_raw: bytes | None = None
    done = 0

    def strip(filtered: bytes | bytearray, n_rows: int) -> Image.Image:
        nonlocal prev_raw
        body = b"\x00" + prev_raw + filtered if prev_raw is not None else bytes(filtered)
        total = n_rows + (prev_raw is not None)
        ihdr = struct.pack(">IIBBBBB", layout.width, total, 8, layout.color_type, 0, 0, 0)
        idat = _stored_zlib(body)
        mini = b"".join(
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
        with Image.open(io.BytesIO(mini), formats=("PNG",)) as im:
            im.load()
            out = im.crop((0, 1, layout.width, total)) if prev_raw is not None else im.copy()
        prev_raw = out.crop((0, n_rows - 1, layout.width, n_rows)).tobytes()
        return out

    need = layout.height * stride

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
                    yield strip(pending[:want], rows)
                    del pending[:want]
                    done += rows
            if inflater.eof or short() <= 0:
                break
    except _INFLATE_ERROR as exc:
        raise _Reject("decode_error", _short(f"PNG data: {exc}")) from exc
    left = layout.height - done
    if len(pending) < left * stride:
        got = done + len(pending) // stride
        raise _Reject("truncated", f"PNG data ends after {min(got, layout.height)} of {layout.height} rows")
    yield strip(pending[: left * stride], left)


class _StripResizer:
    """``Image.resize(size, resample)`` fed with horizontal strips, top to bottom.

    Pillow resamples horizontally, then vertically, with separable filters, so each strip is resized
    horizontally on arrival and output rows are produced as soon as the source rows under their filter window
    are in. Only that window and the output are held, so memory does not grow with the source height. Output
    equals the in-memory resize up to floating-point rounding (a level here and there)."""

    def __init__(
        self,
        src_size: tuple[int, int],
        out_size: tuple[int, int],
        mode: str,
        resample: Image.Resampling,
        extent: tuple[float, float] | None = None,
    ) -> None:
        # ``extent``: the source area that maps onto the output, when it is not the whole source (a reduced
        # source whose last row and column are partial blocks: Pillow's reducing_gap resize does the same).
        (sw, sh), (ow, oh) = src_size, out_size
        self.sw, self.sh, self.ow, self.oh = sw, sh, ow, oh
        self.extent = extent or (float(sw), float(sh))
        self.resample = resample
        self.scale = self.extent[1] / oh
        self.support = _FILTER_SUPPORT[resample] * max(self.scale, 1.0)
        self.out = Image.new(mode, out_size)
        self.window: Image.Image | None = None  # horizontally resized source rows [top, fed)
        self.top = self.fed = self.done = 0

    def _first_row(self, o: int) -> int:
        return max(0, int((o + 0.5) * self.scale - self.support + 0.5))

    def _end_row(self, o: int) -> int:
        return min(self.sh, int((o + 0.5) * self.scale + self.support + 0.5))

    def feed(self, strip: Image.Image) -> None:
        h = strip.height
        # horizontal pass only (height unchanged)
        strip = strip.resize((self.ow, h), self.resample, box=(0.0, 0.0, self.extent[0], float(h)))
        if self.window is None:
            self.window = strip
        else:
            grown = Image.new(strip.mode, (self.ow, self.window.height + h))
            grown.paste(self.window, (0, 0))
            grown.paste(strip, (0, self.window.height))
            self.window = grown
        self.fed += h
        end = self.done
        while end < self.oh and self._end_row(end) <= self.fed:
            end += 1
        if end == self.done:
            return
        bottom = min(end * self.scale - self.top, float(self.window.height))  # fp: never past the rows held
        box = (0.0, self.done * self.scale - self.top, float(self.ow), bottom)
        part = self.window.resize((self.ow, end - self.done), self.resample, box=box)
        self.out.paste(part, (0, self.done))
        self.done = end
        if self.done < self.oh:
            first = self._first_row(self.done)
            self.window = self.window.crop((0, first - self.top, self.ow, self.window.height))
            self.top = first
        else:
            self.window = None

    def result(self) -> Image.Image:
        if self.done != self.oh:  # pragma: no cover - every row is produced once all strips are fed
            raise RuntimeError(f"strip resize produced {self.done} of {self.oh} rows")
        return self.out


def _process_big_png(
    data: bytes,
    layout: _PngLayout,
    icc: bytes | None,
    *,
    orientation: int,
    out_size: tuple[int, int],
    resample: Image.Resampling,
) -> tuple[Image.Image, list[str]]:
    """Decode (every row: the verification), normalise and resize a big PNG strip by strip. Returns the
    output image in displayed orientation and the notes."""
    notes: list[str] = ["strip_decoded"]
    swap = orientation in (5, 6, 7, 8)
    stored_out = (out_size[1], out_size[0]) if swap else out_size
    fx, fy = _reduce_factors((layout.width, layout.height), stored_out)
    reduced = (-(-layout.width // fx), -(-layout.height // fy))
    resizer: _StripResizer | None = None
    convert: Callable[[Image.Image], Image.Image] | None = None
    # strips of whole reduce blocks, so reducing strip by strip equals reducing the whole image
    for strip in _png_strips(data, layout, row_multiple=fy):
        if convert is None:
            convert = _icc_converter(icc, strip.mode, notes)
        work, _had_alpha = _normalise_mode(convert(strip), notes if resizer is None else [])
        if fx > 1 or fy > 1:
            work = work.reduce((fx, fy))
        if resizer is None:
            extent = (layout.width / fx, layout.height / fy)
            resizer = _StripResizer(reduced, stored_out, work.mode, resample, extent)
        resizer.feed(work)
    if resizer is None:  # pragma: no cover - a PNG has at least one row
        raise _Reject("decode_error", "PNG has no rows")
    out = resizer.result()
    notes.append("resized")
    if orientation != 1:
        out = out.transpose(_ORIENT_OPS[orientation])
        notes.append(f"exif_orientation_{orientation}_applied")
    return out, notes


def _process_image(
    data: bytes,
    *,
    target_size: Callable[[int, int], tuple[int, int]],
    max_pixels: int,
    min_pixels: int,
    min_side: int,
    max_image_pixels: int,
    image_format: ImageFormat,
    jpeg_quality: int,
    resample: Resample,
    relaxed: bool,
) -> ImageResult:
    fmt: str | None = None
    mode: str | None = None
    disp_w = disp_h = 0
    try:
        # ---- 1. header only -------------------------------------------------------------------------
        try:
            img = Image.open(io.BytesIO(data), formats=_OPEN_FORMATS)
        except UnidentifiedImageError as exc:
            magic = _sniff_image_magic(data)
            if magic is None:
                raise _Reject(
                    "not_an_image", _short(f"unrecognised content, starts with {data[:16]!r}")
                ) from exc
            dims = _header_dims(magic, data)
            if dims is not None and min(dims) == 0:
                raise _Reject("too_small", f"{magic} header claims {dims[0]}x{dims[1]}") from exc
            raise _Reject("decode_error", _short(f"{magic} signature but unreadable/unsupported")) from exc
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            match = _BOMB_PIXELS.search(str(exc))
            if not relaxed and match is not None and int(match.group(1)) <= max_image_pixels:
                raise _RetryRelaxed from exc
            raise _Reject("decompression_bomb", _short(exc)) from exc
        except _Reject:
            raise
        except Exception as exc:
            raise _classify_decode_error(exc) from exc

        with img:
            fmt, mode = img.format, img.mode
            width, height = img.size
            disp_w, disp_h = width, height  # stored size until the orientation is known
            if width <= 0 or height <= 0:
                raise _Reject("too_small", f"{width}x{height}")
            if width * height > max_image_pixels:
                raise _Reject(
                    "decompression_bomb",
                    f"header claims {width}x{height} = {width * height} px > {max_image_pixels}",
                )
            src_format = fmt or ""
            # PNGs: one walk over the chunks gives the eXIf chunk (wherever it is: Pillow's getexif() would
            # decode the whole image to reach one after IDAT) and the compressed data, which is verified
            # without reconstruction when the file is kept, or decoded in strips when it is big.
            layout = _png_layout(data) if src_format == "PNG" else None
            decoded = src_format == "PNG" and layout is None
            if decoded:  # unusual PNG: Pillow decodes it whole, once (a second load() would return silently)
                _full_decode(img, relaxed)
            orientation = _png_orientation(layout) if layout is not None else _orientation(img)
            swap = orientation in (5, 6, 7, 8)
            disp_w, disp_h = (height, width) if swap else (width, height)
            pixels = disp_w * disp_h
            if min(disp_w, disp_h) < min_side:
                raise _Reject("too_small", f"{disp_w}x{disp_h}: a side is below {min_side} px")
            # ---- 2. model geometry (aspect-ratio limit) before paying for a decode ----------------------
            try:
                t_h, t_w = target_size(disp_h, disp_w)
            except ValueError as exc:
                raise _Reject("aspect_ratio", _short(exc)) from exc
            within = min_pixels <= pixels <= max_pixels
            keep = (
                src_format in _KEEPABLE
                and orientation == 1
                and mode in ("RGB", "L")
                and within
                and (image_format == "keep" or _FMT_TO_EXT[image_format] == _KEEPABLE[src_format])
            )
            needs_resize = not within and (t_w, t_h) != (disp_w, disp_h)
            if layout is not None and keep and not layout.interlaced:
                _verify_png_stream(data, layout)
                return _kept(data, fmt, mode, disp_w, disp_h, [])
            if (
                layout is not None
                and needs_resize
                and layout.strippable
                and width * height >= _STRIP_MIN_PIXELS
            ):
                icc = img.info.get("icc_profile")
                big, notes = _process_big_png(
                    data,
                    layout,
                    icc if isinstance(icc, bytes) else None,
                    orientation=orientation,
                    out_size=(t_w, t_h),
                    resample=_RESAMPLE[resample],
                )
                out_fmt = _choose_output(
                    image_format, src_format, mode or "", "alpha_composited_on_white" in notes
                )
                return _encoded(big, out_fmt, jpeg_quality, False, fmt, mode, disp_w, disp_h, notes)
            notes = []
            # ---- 3. full decode (DCT-scaled for JPEGs: big ones that will be downsized anyway, and kept
            # ones, which are verified at 1/8 scale: every entropy-coded block is still decoded, so
            # truncation and corrupt data are found exactly as at full scale, at a third of the cost) -----
            if src_format in ("JPEG", "MPO") and (needs_resize or keep):
                if keep:
                    img.draft(mode, (1, 1))
                else:
                    img.draft("RGB", (t_h, t_w) if swap else (t_w, t_h))  # draft works in stored orientation
                    if img.size != (width, height):
                        notes.append("jpeg_draft_scaled")
            if not decoded:
                _full_decode(img, relaxed)
            if keep:
                return _kept(data, fmt, mode, disp_w, disp_h, [])
            # ---- 4. normalise once ---------------------------------------------------------------------
            icc = img.info.get("icc_profile")
            work: Image.Image = img
            if orientation != 1:
                work = work.transpose(_ORIENT_OPS[orientation])
                notes.append(f"exif_orientation_{orientation}_applied")
            work = _apply_icc(work, icc if isinstance(icc, bytes) else None, notes)
            work, had_alpha = _normalise_mode(work, notes)
            if needs_resize:
                work = _resize(work, (t_w, t_h), _RESAMPLE[resample])
                notes.append("resized")
            out_fmt = _choose_output(image_format, src_format, mode or "", had_alpha)
            lossless = out_fmt == "webp" and src_format == "WEBP" and _is_lossless_webp(data)
            return _encoded(work, out_fmt, jpeg_quality, lossless, fmt, mode, disp_w, disp_h, notes)
    except _RetryRelaxed:
        raise
    except _Reject as rej:
        return _rejected(rej.reason, rej.detail, fmt, mode, disp_w, disp_h)
    except Exception as exc:  # any other decoder/plugin failure: never crash the caller
        classified = _classify_decode_error(exc)
        return _rejected(classified.reason, classified.detail, fmt, mode, disp_w, disp_h)


def _kept(
    data: bytes, fmt: str | None, mode: str | None, width: int, height: int, notes: list[str]
) -> ImageResult:
    """The original bytes as output; anything after the image's end marker is cut off (and noted)."""
    end = _encoded_end(fmt or "", data)
    out = data
    if end is not None and end < len(data):
        out = data[:end]
        notes = [*notes, f"trailing_data_stripped:{len(data) - end}"]
    return ImageResult(
        "ok",
        fmt,
        mode,
        width,
        height,
        out_width=width,
        out_height=height,
        out_ext=_KEEPABLE[fmt or ""],  # type: ignore[arg-type]
        out_bytes=out,
        kept_original=out is data,
        notes=tuple(notes),
    )


def _encoded(
    work: Image.Image,
    out_fmt: Literal["jpeg", "png", "webp"],
    quality: int,
    lossless: bool,
    fmt: str | None,
    mode: str | None,
    width: int,
    height: int,
    notes: list[str],
) -> ImageResult:
    out = _encode(work, out_fmt, quality, lossless)
    return ImageResult(
        "ok",
        fmt,
        mode,
        width,
        height,
        out_width=work.width,
        out_height=work.height,
        out_ext=_FMT_TO_EXT[out_fmt],
        out_bytes=out,
        notes=tuple(notes),
    )


def _rejected(
    reason: str, detail: str | None, fmt: str | None, mode: str | None, width: int, height: int
) -> ImageResult:
    return ImageResult("rejected", fmt, mode, width, height, reason=reason, detail=detail)


def process_image(
    data: bytes,
    *,
    target_size: Callable[[int, int], tuple[int, int]],
    max_pixels: int,
    max_image_pixels: int = 256_000_000,
    image_format: ImageFormat = "keep",
    jpeg_quality: int = 92,
    min_pixels: int = 0,
    min_side: int = 1,
    resample: Resample = "bicubic",
) -> ImageResult:
    """Verify one image by a full decode and return it ready for a shard.

    ``target_size(height, width) -> (H, W)`` is the model's factor-aligned resize (smart_resize); a
    ValueError from it is an ``aspect_ratio`` reject. Images whose displayed pixel count lies in
    ``[min_pixels, max_pixels]`` and that are JPEG/PNG/WebP in RGB or L without EXIF rotation are kept
    byte-identical (when ``image_format`` is ``keep`` or their own format); any other image is normalised and,
    when outside that range, resized once to exactly ``target_size(h, w)`` (so pass the model's min pixels as
    ``min_pixels`` to have small images upscaled here rather than at training time). Headers claiming more
    than ``max_image_pixels`` are refused as ``decompression_bomb`` before any pixel is decoded; a displayed
    side shorter than ``min_side`` is ``too_small``. Never raises for bad input.

    The resize filter defaults to ``bicubic``: what Qwen's processors use (transformers
    ``Qwen2VLImageProcessor`` resample, qwen-vl-utils ``Image.resize``), so a full-resolution decode gives
    the pixels training would have computed from the original; ``lanczos`` is sharper and ~40% slower.
    """
    if not data:
        return _rejected("zero_size", "empty payload", None, None, 0, 0)
    kwargs: dict[str, Any] = {
        "target_size": target_size,
        "max_pixels": max_pixels,
        "min_pixels": min_pixels,
        "min_side": min_side,
        "resample": resample,
        "max_image_pixels": max_image_pixels,
        "image_format": image_format,
        "jpeg_quality": jpeg_quality,
    }
    try:
        return _process_image(data, relaxed=False, **kwargs)
    except _RetryRelaxed:
        pass
    # Pillow's global bomb ceiling (2 x Image.MAX_IMAGE_PIXELS, ~179 MP by default) is below the caller's
    # limit and this image lies in between: lift Pillow's ceiling to the caller's limit for this one image.
    # The global is process-wide, so the change is serialised and restored.
    with _PILLOW_LIMIT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = max(saved or 0, -(-max_image_pixels // 2))
        try:
            return _process_image(data, relaxed=True, **kwargs)
        except _RetryRelaxed:  # pragma: no cover - relaxed runs never ask again
            return _rejected("decompression_bomb", "exceeds Pillow limit", None, None, 0, 0)
        finally:
            Image.MAX_IMAGE_PIXELS = saved


# --------------------------------------------------------------------------------------------------------
# Videos
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoResult:
    """Outcome of :func:`probe_video`.

    ``width``/``height`` are as displayed: when ``rotation`` (clockwise degrees, 0/90/180/270) is 90 or 270
    they are the coded size swapped. Decoders that do not auto-rotate (PyAV/decord) deliver coded-size
    frames: swap back when ``rotation in (90, 270)`` if the trainer sees unrotated frames.
    """

    status: Literal["ok", "rejected"]
    reason: str | None
    detail: str | None
    codec: str | None
    width: int
    height: int
    rotation: int
    fps: float
    frames: int
    duration: float
    sampled_indices: tuple[int, ...]


@dataclass(frozen=True)
class SampledFrame:
    """A frame the sampler picked, handed to ``probe_video(on_frame=...)`` during the verification decode."""

    #: 0-based position among the sampled frames (in presentation order).
    position: int
    #: Number of sampled frames (distinct indices).
    count: int
    #: Index of the frame in presentation order.
    index: int
    #: Clockwise degrees (0/90/180/270) to turn the frame to display it.
    rotation: int
    #: The decoded ``av.VideoFrame`` at coded (unrotated) size; valid only during the call.
    frame: Any


class _VideoTimeout(Exception):
    pass


class _DeadlineReader(io.RawIOBase):
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
            raise _VideoTimeout("wall-clock timeout while reading")

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


def _sniff_video_container(data: bytes) -> bool:
    head = data[:64]
    return (
        head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")
        or head.startswith(b"\x1a\x45\xdf\xa3")  # Matroska / WebM
        or (head[:4] == b"RIFF" and head[8:12] == b"AVI ")
        or head.startswith(b"OggS")
        or head.startswith(b"FLV")
        or head.startswith(b"\x00\x00\x01\xba")  # MPEG-PS
        or (len(data) > 376 and data[0] == 0x47 and data[188] == 0x47 and data[376] == 0x47)  # MPEG-TS
    )


def _video_reject(reason: str, detail: str | None, **known: Any) -> VideoResult:
    fields: dict[str, Any] = {
        "codec": None,
        "width": 0,
        "height": 0,
        "rotation": 0,
        "fps": 0.0,
        "frames": 0,
        "duration": 0.0,
    }
    fields.update(known)
    return VideoResult(status="rejected", reason=reason, detail=detail, sampled_indices=(), **fields)


def _rotation_from_degrees(ccw_degrees: float) -> int:
    """Display-matrix angle (counter-clockwise, as FFmpeg/PyAV report it) -> clockwise 'rotate' tag."""
    return int(round(-ccw_degrees / 90.0)) * 90 % 360


def probe_video(
    data: bytes,
    *,
    choose_frames: Callable[[int, float], list[int]],
    timeout_s: float = 60.0,
    max_frame_pixels: int = 100_000_000,
    on_frame: Callable[[SampledFrame], None] | None = None,
) -> VideoResult:
    """Read a video's metadata, then verify that the frames ``choose_frames(n_frames, fps)`` picks decode.

    Frame indices count decoded frames in presentation order. A coded frame size over ``max_frame_pixels``
    is a ``decompression_bomb`` reject, decided from the header before the sampled frames are decoded.
    ``on_frame`` is called with every sampled frame, in order, as it is decoded (an exception from it makes
    the video a ``video_decode_error`` reject). Never raises for bad input; bounded by ``timeout_s`` of
    wall-clock time, ``on_frame`` included.
    """
    if not data:
        return _video_reject("zero_size", "empty payload")
    deadline = time.monotonic() + timeout_s
    import av  # local import keeps image-only workers light

    known: dict[str, Any] = {}
    container: Any = None
    try:
        try:
            reader: IO[bytes] = _DeadlineReader(data, deadline)  # type: ignore[assignment]
            container = av.open(reader, mode="r", metadata_errors="ignore")
        except _VideoTimeout:
            raise
        except Exception as exc:
            if isinstance(exc.__cause__ or exc.__context__, _VideoTimeout):
                raise _VideoTimeout(str(exc)) from exc
            reason = "video_decode_error" if _sniff_video_container(data) else "not_a_video"
            return _video_reject(reason, _short(exc))

        fmt_name = container.format.name or ""
        if fmt_name == "image2" or fmt_name.endswith("_pipe") or fmt_name in ("gif", "webp", "apng"):
            # still images / animated graphics that libav happily opens: not videos for this pipeline
            return _video_reject("not_a_video", f"container format {fmt_name!r} is an image format")
        if not container.streams.video:
            return _video_reject("no_video_stream", f"streams: {[s.type for s in container.streams]}")
        stream = container.streams.video[0]
        cc = stream.codec_context
        if cc is None:
            return _video_reject("video_decode_error", "no decoder for the video stream's codec")
        codec = cc.name
        coded_w, coded_h = int(cc.width or 0), int(cc.height or 0)
        known.update(codec=codec, width=coded_w, height=coded_h)

        rate: Fraction | None = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        duration = 0.0
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / av.time_base
        known.update(fps=fps, duration=duration)
        if coded_w * coded_h > max_frame_pixels:
            return _video_reject(
                "decompression_bomb",
                f"header claims {coded_w}x{coded_h} = {coded_w * coded_h} px per frame > {max_frame_pixels}",
                **known,
            )

        rotation = 0
        rotate_tag = stream.metadata.get("rotate") if stream.metadata else None
        if rotate_tag is not None:
            try:
                rotation = int(round(float(rotate_tag) / 90.0)) * 90 % 360
            except ValueError:
                rotation = 0

        n_frames = int(stream.frames or 0)
        if n_frames <= 0:
            # container has no frame count (e.g. WebM): count packets by demuxing only (no decode)
            counted = 0
            for packet in container.demux(stream):
                if time.monotonic() > deadline:
                    raise _VideoTimeout("timeout while counting packets")
                if packet.size > 0:
                    counted += 1
            n_frames = counted
            if n_frames <= 0 and duration > 0 and fps > 0:
                n_frames = int(round(duration * fps))
            # start decoding from a fresh demuxer rather than trusting a seek back to 0
            container.close()
            container = av.open(_DeadlineReader(data, deadline), mode="r", metadata_errors="ignore")
            stream = container.streams.video[0]
        if n_frames <= 0:
            return _video_reject("video_decode_error", "no frames in video stream", **known)
        if fps <= 0 and duration > 0:
            fps = n_frames / duration
        if duration <= 0 and fps > 0:
            duration = n_frames / fps
        known.update(frames=n_frames, fps=fps, duration=duration)

        try:
            indices = sorted({int(i) for i in choose_frames(n_frames, fps)})
        except Exception as exc:
            return _video_reject("frame_selection", _short(exc), **known)
        if indices and (indices[0] < 0 or indices[-1] >= n_frames):
            return _video_reject(
                "frame_selection", f"indices outside [0, {n_frames}): {indices[0]}..{indices[-1]}", **known
            )

        # ---- sequential decode up to the last needed frame (always at least the first frame) ---------
        last_needed = indices[-1] if indices else 0
        position = {index: pos for pos, index in enumerate(indices)}
        found = 0
        rotation_known = rotation != 0
        decoded = 0
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            if time.monotonic() > deadline:
                raise _VideoTimeout(f"timeout after decoding {decoded} frames")
            if not rotation_known:
                rotation_known = True
                frame_rotation = float(getattr(frame, "rotation", 0) or 0)
                if frame_rotation:
                    rotation = _rotation_from_degrees(frame_rotation)
            if frame.width * frame.height > max_frame_pixels:
                return _video_reject(
                    "decompression_bomb",
                    f"frame {decoded} is {frame.width}x{frame.height} px > {max_frame_pixels}",
                    **known,
                )
            if getattr(frame, "is_corrupt", False):
                # the decoder concealed an error in this frame (and frames referencing it inherit the damage)
                return _video_reject(
                    "video_decode_error", f"frame {decoded} is corrupt (decoder concealed errors)", **known
                )
            pos = position.get(decoded)
            if pos is not None:
                found += 1
                if on_frame is not None:
                    try:
                        on_frame(SampledFrame(pos, len(indices), decoded, rotation, frame))
                    except _VideoTimeout:
                        raise
                    except Exception as exc:
                        return _video_reject("video_decode_error", _short(f"frame {decoded}: {exc}"), **known)
            decoded += 1
            if decoded > last_needed:
                break
        if time.monotonic() > deadline:
            raise _VideoTimeout(f"timeout after decoding {decoded} frames")
        if decoded == 0:
            return _video_reject("video_decode_error", "no frame could be decoded", **known)
        if found < len(indices):
            missing = min(i for i in indices if i >= decoded)
            return _video_reject(
                "video_decode_error",
                f"only {decoded} of {n_frames} frames decodable; missing sampled index {missing}",
                **known,
            )
        disp_w, disp_h = (coded_h, coded_w) if rotation in (90, 270) else (coded_w, coded_h)
        return VideoResult(
            status="ok",
            reason=None,
            detail=None,
            codec=codec,
            width=disp_w,
            height=disp_h,
            rotation=rotation,
            fps=fps,
            frames=n_frames,
            duration=duration,
            sampled_indices=tuple(indices),
        )
    except _VideoTimeout as exc:
        return _video_reject("video_timeout", _short(exc), **known)
    except Exception as exc:
        if isinstance(exc.__cause__ or exc.__context__, _VideoTimeout):
            return _video_reject("video_timeout", _short(exc), **known)
        return _video_reject("video_decode_error", _short(exc), **known)
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.close()
