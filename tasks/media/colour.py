"""Colour normalisation: every re-encoded image leaves as 8-bit RGB or L in sRGB, without alpha.

Trainers' processors convert to RGB with Pillow's defaults, which get three things wrong for training data:
an embedded colour profile is ignored (a wide-gamut or CMYK photo shifts colour), alpha is dropped onto
black (transparent cut-outs and diagrams turn into black boxes), and 16-bit or float greyscale is clipped
(10/12-bit scientific images come out white or black). Here the profile is applied and dropped, alpha is
composited on white, and high-bit greyscale is scaled by its effective bit depth. Each change is noted.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image

try:  # Pillow is normally built with LittleCMS; fall back to dropping profiles if not.
    from PIL import ImageCms

    _SRGB: Any = ImageCms.createProfile("sRGB")
except Exception:  # pragma: no cover - depends on the Pillow build
    ImageCms = None  # type: ignore[assignment]
    _SRGB = None

__all__ = ["apply_icc", "icc_converter", "normalise_mode"]

_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}
_HIGH_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I", "F"}


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


def icc_converter(icc: bytes | None, mode: str, notes: list[str]) -> Callable[[Image.Image], Image.Image]:
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


def apply_icc(img: Image.Image, icc: bytes | None, notes: list[str]) -> Image.Image:
    """Convert colour to sRGB using the embedded profile (RGB/RGBA/CMYK); otherwise drop the profile."""
    return icc_converter(icc, img.mode, notes)(img)


def normalise_mode(img: Image.Image, notes: list[str]) -> tuple[Image.Image, bool]:
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
