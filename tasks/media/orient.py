"""EXIF orientation: which way up an image is displayed, and the transpose that shows it so.

The pipeline's sizes are displayed sizes (what a viewer, and ``ImageOps.exif_transpose``, shows), because the
model's processor sees the image upright; a rotated image is never kept as is, so the tag is applied once and
dropped with the rest of the metadata. Orientations 5-8 swap width and height.
"""

from __future__ import annotations

from PIL import Image

__all__ = ["ORIENT_OPS", "displayed_size", "exif_orientation", "image_orientation", "swaps_sides"]

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


def _valid(value: object) -> int:
    return value if isinstance(value, int) and value in ORIENT_OPS else 1


def image_orientation(img: Image.Image) -> int:
    """The EXIF orientation of an opened image (1 when absent, invalid or unreadable)."""
    try:
        value = img.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:
        return 1
    return _valid(value)


def exif_orientation(exif: bytes | None) -> int:
    """The orientation in a raw EXIF block (a PNG's eXIf chunk); 1 when absent, invalid or unreadable."""
    if not exif:
        return 1
    parsed = Image.Exif()
    try:
        parsed.load(exif)
        value = parsed.get(_EXIF_ORIENTATION, 1)
    except Exception:
        return 1
    return _valid(value)


def swaps_sides(orientation: int) -> bool:
    """Whether showing the image upright swaps its width and height."""
    return orientation in (5, 6, 7, 8)


def displayed_size(stored: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(width, height) as displayed, from the stored (width, height)."""
    return (stored[1], stored[0]) if swaps_sides(orientation) else stored
