"""Encoding the images the pipeline writes: which format, and bytes that depend on the pixels only.

Output must be deterministic (the same input gives the same shard bytes on any worker, any day), so no
metadata is carried over: no EXIF, ICC, XMP, dpi or timestamps, and encoder settings are fixed. ``keep``
chooses by content: WebP stays WebP, graphics (alpha, palettes, PNG sources) go lossless to PNG, photos to
JPEG. One options function per output format, found through :data:`_SAVE_OPTIONS`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, Literal

from PIL import Image

__all__ = [
    "FMT_TO_EXT",
    "EncodeFormat",
    "ImageFormat",
    "OutExt",
    "choose_output",
    "encode",
    "encode_image",
    "is_lossless_webp",
]

ImageFormat = Literal["keep", "jpeg", "webp", "png"]
EncodeFormat = Literal["jpeg", "png", "webp"]
OutExt = Literal["jpg", "png", "webp"]

FMT_TO_EXT: dict[str, OutExt] = {"jpeg": "jpg", "png": "png", "webp": "webp"}


def _jpeg_options(quality: int, lossless: bool) -> dict[str, Any]:
    return {"format": "JPEG", "quality": quality, "optimize": False, "progressive": False}


def _png_options(quality: int, lossless: bool) -> dict[str, Any]:
    return {"format": "PNG", "compress_level": 6}


def _webp_options(quality: int, lossless: bool) -> dict[str, Any]:
    if lossless:
        return {"format": "WEBP", "lossless": True, "quality": 100, "method": 4, "exact": False}
    return {"format": "WEBP", "quality": quality, "method": 4}


#: ``Image.save`` options of every output format, given the JPEG/WebP quality and whether WebP is lossless.
_SAVE_OPTIONS: dict[str, Callable[[int, bool], dict[str, Any]]] = {
    "jpeg": _jpeg_options,
    "png": _png_options,
    "webp": _webp_options,
}


def is_lossless_webp(data: bytes) -> bool:
    """Simple (VP8L) or extended (VP8X ... VP8L) lossless WebP."""
    return data[12:16] == b"VP8L" or (data[12:16] == b"VP8X" and b"VP8L" in data[30:4096])


def choose_output(image_format: ImageFormat, src_format: str, src_mode: str, had_alpha: bool) -> EncodeFormat:
    """The format a re-encoded image is written in (``image_format``, or by content for ``keep``)."""
    if image_format != "keep":
        return image_format
    if src_format == "WEBP":
        return "webp"
    if had_alpha or src_format == "PNG" or src_mode in ("P", "1"):
        return "png"  # graphics / cut-outs: lossless
    return "jpeg"


def encode(img: Image.Image, fmt: EncodeFormat, quality: int, lossless: bool) -> bytes:
    """``img`` encoded as ``fmt`` with fixed settings and no metadata."""
    img.info = {}  # no EXIF/ICC/XMP/dpi carried over: deterministic, metadata-free output
    buf = io.BytesIO()
    img.save(buf, **_SAVE_OPTIONS[fmt](quality, lossless))
    return buf.getvalue()


def encode_image(img: Image.Image, fmt: EncodeFormat, quality: int = 92) -> bytes:
    """Encode ``img`` (RGB or L) the way the pipeline writes media: deterministic, no metadata."""
    return encode(img, fmt, quality, lossless=False)
