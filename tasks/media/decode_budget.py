"""The memory one image's decode may take, judged from its header before any pixel is decoded.

The header limit (``--max-image-pixels``) counts pixels, but what a decode costs depends on the format: a
15000x15000 WebP is 34 bytes on disk and 225 MP, under the limit, yet Pillow's WebP decoder holds the canvas
as RGBA and hands it over as a copy, the pipeline then converts and resizes it: some 25 bytes a pixel,
5.6 GB. So every image is priced before it is decoded: pixels x the bytes a pixel costs on the path the
image will take (:func:`decode_cost`), against the run's :class:`DecodeBudget`.

- Formats that decode reduced cost a fraction of their pixels: JPEG/MPO decoded with DCT scaling near the
  target size (``draft``; a progressive JPEG still holds every DCT coefficient, 2 bytes each, counted from its
  sampling factors), and PNGs decoded in strips (``big_png``).
- Every other path decodes the whole image: priced per format from what Pillow's decoder and the pipeline's
  steps allocate (measured peak RSS of :func:`~.image.process_image` per format at 36 MP, rounded up), a
  one-byte grey image at a quarter of that. Pillow's WebP plugin has no scaled decode, so WebP is priced
  whole.

Over budget, the image is refused as ``decode_budget`` naming the format, the size, the path and both
figures. Only the first frame of an animated or multi-page image is decoded (the trainer's ``Image.open``
gives it), so frames do not multiply the cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PIL import Image

from .rejects import Reject

__all__ = ["BYTES_PER_HEADER_PIXEL", "DecodeBudget", "decode_cost", "full_decode_bpp", "jpeg_coefficient_bpp"]

#: Bytes a decode may take per pixel the header limit allows: 4 (one RGBA/RGBX pixel as Pillow stores it),
#: so the default ``--max-image-pixels`` (256 MP) gives 1 GiB per image decode.
BYTES_PER_HEADER_PIXEL = 4

#: Peak bytes per pixel of a whole-image decode through the media stage (decoder, mode conversion, resize
#: copies), by Pillow format: measured at 6000x6000 RGB/RGBA (WEBP 25.0, JPEG2000 19.3, QOI/DDS 7.0, SGI 6.0,
#: BMP/TIFF/TGA/PCX/PPM 5.4, PNG 4.0 + conversion) and rounded up. Formats whose plugin may be absent (AVIF,
#: HEIF, JXL) are priced like WebP's neighbours.
FULL_DECODE_BPP: dict[str, float] = {
    "WEBP": 26.0,
    "JPEG2000": 20.0,
    "AVIF": 16.0,
    "HEIF": 16.0,
    "JXL": 16.0,
    "JPEG": 10.0,  # a progressive file also holds its coefficients
    "MPO": 10.0,
}
DEFAULT_FULL_DECODE_BPP = 8.0
#: One-byte grey modes stay one byte a pixel through the pipeline.
_GREY_MODES = frozenset({"1", "L"})
#: A JPEG decoded with DCT scaling: the scaled output and the resize (measured 0.5).
JPEG_DRAFT_BPP = 0.75
#: A PNG decoded in strips: rows in flight and the strip resizer (measured 0.8-1.3 at 36-225 MP).
PNG_STRIP_BPP = 1.5


def full_decode_bpp(fmt: str, mode: str) -> float:
    """Bytes per pixel of decoding an image of Pillow ``fmt`` and ``mode`` whole through the media stage."""
    bpp = FULL_DECODE_BPP.get(fmt, DEFAULT_FULL_DECODE_BPP)
    return max(2.0, bpp / 4) if mode in _GREY_MODES else bpp


def jpeg_coefficient_bpp(img: Image.Image) -> float:
    """Bytes per pixel of a progressive JPEG's coefficient buffer (2 bytes per DCT coefficient, summed over
    its components' sampling factors); 0 for a baseline JPEG, decoded one block row at a time."""
    if not (img.info.get("progressive") or img.info.get("progression")):
        return 0.0
    layers = getattr(img, "layer", None) or []
    factors = [(int(h), int(v)) for _id, h, v, *_rest in layers] or [(1, 1)] * 3
    h_max = max(h for h, _ in factors)
    v_max = max(v for _, v in factors)
    return 2.0 * sum(h * v / (h_max * v_max) for h, v in factors)


def decode_cost(img: Image.Image, reduced: str | None) -> int:
    """Bytes decoding ``img`` (header read, no pixel decoded) will take: whole, or on the ``reduced`` path
    (``"jpeg_draft"``, ``"png_strips"``)."""
    pixels = img.width * img.height
    fmt, mode = img.format or "", img.mode
    if reduced == "jpeg_draft":
        bpp = JPEG_DRAFT_BPP + jpeg_coefficient_bpp(img)
    elif reduced == "png_strips":
        bpp = PNG_STRIP_BPP
    else:
        bpp = full_decode_bpp(fmt, mode) + (jpeg_coefficient_bpp(img) if fmt in ("JPEG", "MPO") else 0.0)
    return math.ceil(pixels * bpp)


@dataclass(frozen=True)
class DecodeBudget:
    """The memory one image's decode may take in a worker (bytes)."""

    max_bytes: int

    @classmethod
    def for_run(cls, max_image_pixels: int, model_max_pixels: int) -> DecodeBudget:
        """4 bytes per pixel of ``--max-image-pixels`` (1 GiB by default), and never less than decoding an
        image of the model's own ``max_pixels`` in the costliest format takes (what the model is fed always
        decodes)."""
        worst = max(FULL_DECODE_BPP.values())
        return cls(max(BYTES_PER_HEADER_PIXEL * max_image_pixels, math.ceil(worst * model_max_pixels)))

    def check(self, img: Image.Image, reduced: str | None) -> None:
        """Refuse ``img`` as ``decode_budget`` when decoding it on that path would take over the budget."""
        cost = decode_cost(img, reduced)
        if cost > self.max_bytes:
            path = {"jpeg_draft": "DCT-scaled", "png_strips": "in strips"}.get(reduced or "", "whole")
            raise Reject(
                "decode_budget",
                f"{img.format} {img.mode} {img.width}x{img.height} decoded {path} needs "
                f"{_mib(cost)} > budget {_mib(self.max_bytes)}",
            )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"
