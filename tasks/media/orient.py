"""Orientation: which way up an image is displayed, and the transpose that shows it so.

The pipeline's sizes are displayed sizes (what ``ImageOps.exif_transpose`` shows), because the model's
processor sees the image upright; a rotated image is never kept as is, so the orientation is applied once
and dropped with the rest of the metadata. Orientations 5-8 swap width and height.

The orientation is the one ``exif_transpose`` applies after ``load()``: Pillow's ``getexif()`` view, which
takes the EXIF block (JPEG APP1, WebP/AVIF/HEIF EXIF, PNG eXIf, ImageMagick's ``Raw profile type exif``
text chunk) and, without an orientation there, ``tiff:Orientation`` in the XMP packet. It is read from the
header, before any pixel is decoded (:func:`pending_orientation`): for a PNG from its metadata chunks
wherever they lie, before or after the image data. Formats whose Pillow plugin turns the image upright on
load (:data:`UPRIGHT_ON_LOAD`: TIFF) have nothing left to apply: their opened size is already displayed.
"""

from __future__ import annotations

import io

from PIL import Image

__all__ = [
    "ORIENT_OPS",
    "UPRIGHT_ON_LOAD",
    "displayed_size",
    "image_orientation",
    "pending_orientation",
    "swaps_sides",
]

#: EXIF orientation -> transpose (identical to ImageOps.exif_transpose).
ORIENT_OPS: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_EXIF_ORIENTATION = 0x0112

#: Pillow formats whose plugin applies the orientation itself on ``load()`` (and reports the displayed size
#: from the header on): applying it again would turn the image twice.
UPRIGHT_ON_LOAD: frozenset[str] = frozenset({"TIFF"})


def _valid(value: object) -> int:
    return value if isinstance(value, int) and value in ORIENT_OPS else 1


def image_orientation(img: Image.Image) -> int:
    """The EXIF orientation of an opened image (1 when absent, invalid or unreadable)."""
    try:
        value = img.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:
        return 1
    return _valid(value)


def _pillow_view(img: Image.Image) -> int:
    """The orientation in Pillow's ``getexif()`` view of what ``img.info`` holds, without loading pixels
    (``Image.getexif`` itself; PNG's override would decode the whole image first)."""
    try:
        value = Image.Image.getexif(img).get(_EXIF_ORIENTATION, 1)
    except Exception:
        return 1
    return _valid(value)


def pending_orientation(img: Image.Image, png_metadata: bytes | None = None) -> int:
    """The orientation ``ImageOps.exif_transpose`` applies to ``img`` after ``load()``, from the header.

    ``png_metadata`` is a PNG's :func:`~.png.metadata_png` (its metadata chunks, wherever they are): opened
    (a failure there is the file's failure, as in a full load) and read as Pillow reads the original."""
    if img.format in UPRIGHT_ON_LOAD:
        return 1
    if png_metadata is None:
        return image_orientation(img)
    with Image.open(io.BytesIO(png_metadata), formats=("PNG",)) as meta:
        return _pillow_view(meta)


def swaps_sides(orientation: int) -> bool:
    """Whether showing the image upright swaps its width and height."""
    return orientation in (5, 6, 7, 8)


def displayed_size(stored: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(width, height) as displayed, from the stored (width, height)."""
    return (stored[1], stored[0]) if swaps_sides(orientation) else stored
