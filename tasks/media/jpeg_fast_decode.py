"""The decode of a JPEG the media step downsizes: :func:`decode_resized_jpeg`.

The image arrives drafted (Pillow's ``draft`` chose the DCT scale 1/1, 1/2, 1/4 or 1/8 from the header). The
decoders of :data:`RESIZED_JPEG_DECODERS` are asked in turn; each returns the decoded image or declines
(None), and Pillow's own ``load()`` decodes what all of them declined. Kept originals never come here: their
verdict is Pillow's draft verify (``image._kept``).

:func:`turbo_decode` decodes with libjpeg-turbo through simplejpeg (the GIL released, no incremental feeding
of the bytes, the output mapped as the image, not copied): 1.4-2.6 ms less CPU than Pillow's decode of a
1.9-12 MP photo. It
takes a file only where its pixels are Pillow's by construction: both run libjpeg-turbo with the same
settings (accurate integer IDCT, fancy upsampling, the same scale, libjpeg's own colour conversion to RGB or
grey), so it declines every file where a setting or a code path could differ: other frame types than
Huffman-coded 8-bit baseline, extended and progressive (no arithmetic coding, 12-bit or lossless); other
components than grey or YCbCr (CMYK, YCCK, RGB-coded, any Adobe marker); an ICC profile (``colour`` applies
it to Pillow's image); a progressive file that leaves a coefficient unrefined (libjpeg's block smoothing
would change between versions); a scale simplejpeg would pick otherwise than Pillow's draft. Any error or
warning from simplejpeg (a truncated or damaged file) declines too, so a reject's reason and detail stay
Pillow's. ``tests/media/test_jpeg_fast_decode.py`` checks the pixels against Pillow's on Pillow's own test
JPEGs and generated ones of every subsampling.

Memory: the image is the decoder's output array, 4 bytes a pixel as Pillow's own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simplejpeg
from PIL import Image, ImageFile

from .decode import full_decode
from .jpeg_layout import JpegLayout, jpeg_layout

__all__ = [
    "RESIZED_JPEG_DECODERS",
    "ResizedJpegDecoder",
    "decode_resized_jpeg",
    "same_as_pillow",
    "turbo_decode",
]

#: Decodes a drafted JPEG (its bytes, Pillow's header-only image) to an image of the drafted size, or
#: declines with None.
ResizedJpegDecoder = Callable[[bytes, Image.Image], Image.Image | None]

#: simplejpeg's output for each Pillow mode it decodes alike: RGBX is Pillow's own layout of an RGB image
#: (4 bytes a pixel), so the output becomes the image without a copy (``_as_image``)
_COLORSPACE = {"RGB": "RGBX", "L": "GRAY"}
#: Huffman-coded frames: baseline, extended sequential, progressive
_HUFFMAN_SOF = frozenset({0xC0, 0xC1, 0xC2})
#: component ids libjpeg reads as RGB-coded when there is no JFIF or Adobe marker
_RGB_IDS = (ord("R"), ord("G"), ord("B"))


def decode_resized_jpeg(data: bytes, img: Image.Image, relaxed: bool) -> Image.Image:
    """``img`` (drafted) decoded by the first decoder that takes it, else by Pillow (``full_decode``:
    failures are rejects)."""
    for decoder in RESIZED_JPEG_DECODERS:
        decoded = decoder(data, img)
        if decoded is not None:
            return decoded
    full_decode(img, relaxed)
    return img


def same_as_pillow(layout: JpegLayout, mode: str) -> bool:
    """libjpeg-turbo decodes this file alike whoever calls it (see the module docstring)."""
    if layout.sof not in _HUFFMAN_SOF or layout.precision != 8 or layout.adobe or layout.icc:
        return False
    if not layout.fully_refined:
        return False
    ids = layout.component_ids
    if mode == "L":
        return len(ids) == 1
    return mode == "RGB" and len(ids) == 3 and (layout.jfif or ids != _RGB_IDS)


def turbo_decode(data: bytes, img: Image.Image) -> Image.Image | None:
    """``img`` decoded by libjpeg-turbo through simplejpeg at Pillow's draft scale, or None where the pixels
    could differ from Pillow's or simplejpeg reports any problem."""
    colorspace = _COLORSPACE.get(img.mode)
    if not isinstance(img, ImageFile.ImageFile) or img.format != "JPEG" or colorspace is None:
        return None
    layout = jpeg_layout(data)
    if layout is None or not same_as_pillow(layout, img.mode):
        return None
    scale = img.decoderconfig[0] if img.decoderconfig else 1
    width, height = img.size
    if (width, height) != (-(-layout.width // scale), -(-layout.height // scale)):
        return None
    if _turbo_eighths(layout.width, layout.height, width, height) != 8 // scale:
        return None
    try:
        arr = simplejpeg.decode_jpeg(data, colorspace, min_width=width, min_height=height, strict=True)
    except Exception:  # Pillow's decode gives the verdict, with its own reason and detail
        return None
    if arr.shape[:2] != (height, width):
        return None
    try:
        decoded = _as_image(arr, img.mode)
    except Exception:  # a Pillow without this buffer mapping: its own decode, as before
        return None
    decoded.info = dict(img.info)
    return decoded


def _as_image(arr: np.ndarray, mode: str) -> Image.Image:
    """simplejpeg's output as a Pillow image of ``mode`` sharing its memory.

    ``Image.fromarray`` copies an RGB array into Pillow's 4-byte layout: 1.4 ms of a 1.9 MP photo's 7.6 ms
    decode, all the gain. ``Image.frombuffer`` maps RGBX memory but as an RGBX image. Pillow's buffer
    mapping (what ``frombuffer`` calls) takes an RGB image on 4-byte rows, the same memory as Pillow's own:
    the tests check the mode, size and pixels against Pillow's decode."""
    height, width = arr.shape[:2]
    mapped = Image.core.map_buffer(arr, (width, height), "raw", 0, (mode, 0, 1))
    return Image.new(mode, (0, 0))._new(mapped)


def _turbo_eighths(width: int, height: int, min_width: int, min_height: int) -> int:
    """The scale (in eighths) simplejpeg decodes at for these minimum sizes: the smallest M/8 whose output,
    rounded up as libjpeg rounds it, is at least the minimum on both sides."""
    for eighths in range(1, 8):
        if -(-width * eighths // 8) >= min_width and -(-height * eighths // 8) >= min_height:
            return eighths
    return 8


#: The decoders asked before Pillow's, in order.
RESIZED_JPEG_DECODERS: tuple[ResizedJpegDecoder, ...] = (turbo_decode,)
