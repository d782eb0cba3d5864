"""The still images of the sample release, from the photos in the scikit-image wheel.

JPEG and PNG bytes are deterministic: Pillow writes no timestamps, and the encoder options are fixed.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Final

import numpy as np
from PIL import Image

from .expected import LARGE_SIZE

__all__ = [
    "exif_rotated_rocket",
    "jpeg_bytes",
    "large_coffee",
    "load",
    "png_bytes",
    "rgba_astronaut",
    "skimage_data_dir",
    "thumb",
]

_JPEG_QUALITY: Final[int] = 85
_THUMB: Final[int] = 384  # longest side of the loose multi-image pictures (keeps the release small)


def skimage_data_dir() -> Path:
    """The ``data`` folder of the installed scikit-image wheel (only files shipped in the wheel are read)."""
    import skimage

    return Path(os.path.dirname(skimage.__file__)) / "data"


def load(name: str) -> Image.Image:
    with Image.open(skimage_data_dir() / name) as im:
        im.load()
        return im.copy()


def jpeg_bytes(im: Image.Image, *, quality: int = _JPEG_QUALITY, exif: bytes | None = None) -> bytes:
    buf = io.BytesIO()
    rgb = im if im.mode in ("RGB", "L") else im.convert("RGB")
    if exif is None:
        rgb.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    else:
        rgb.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False, exif=exif)
    return buf.getvalue()


def png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=False, compress_level=9)
    return buf.getvalue()


def thumb(im: Image.Image, longest: int = _THUMB) -> Image.Image:
    w, h = im.size
    scale = longest / max(w, h)
    if scale >= 1:
        return im
    return im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.LANCZOS)


def rgba_astronaut() -> Image.Image:
    """astronaut.png with a soft circular alpha mask (a real RGBA PNG)."""
    im = load("astronaut.png").convert("RGB")
    w, h = im.size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = np.hypot(xx - w / 2, yy - h / 2) / (min(w, h) / 2)
    alpha = np.clip((1.15 - r) * 255 / 0.3, 0, 255).astype(np.uint8)
    out = im.convert("RGBA")
    out.putalpha(Image.fromarray(alpha, mode="L"))
    return out


def exif_rotated_rocket() -> tuple[bytes, tuple[int, int]]:
    """rocket.jpg stored rotated with EXIF Orientation=6; returns (jpeg bytes, displayed size).

    Orientation 6 means "rotate 90 degrees clockwise to display", so the stored pixels are the upright photo
    rotated 90 degrees counter-clockwise: stored 427x640, displayed 640x427.
    """
    upright = load("rocket.jpg").convert("RGB")
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation
    return jpeg_bytes(stored, exif=exif.tobytes()), upright.size


def large_coffee() -> bytes:
    """coffee.png cropped to 4:3 and upscaled with LANCZOS to 6000x4500 (27 MP)."""
    im = load("coffee.png").convert("RGB")
    w, h = im.size  # 600x400
    cw = h * 4 // 3
    left = (w - cw) // 2
    im = im.crop((left, 0, left + cw, h)).resize(LARGE_SIZE, Image.Resampling.LANCZOS)
    return jpeg_bytes(im, quality=85)
