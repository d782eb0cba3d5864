"""How a JPEG that is downsized anyway is decoded before the resize (``--decode``): one entry per path.

Each path sets up the decoder of an opened, not yet loaded JPEG for a downsize to ``size`` (its stored
orientation); the caller then decodes with ``load()``. Both paths keep the decoded image at least ``size``
(libjpeg's DCT scaling by 1/2, 1/4 or 1/8 only while the result stays that large, Pillow's ``draft``), so the
bicubic resize after it reaches exactly the model's size and token counts do not depend on the path.

- ``exact`` (default): libjpeg's accurate integer IDCT and its smooth ("fancy") chroma upsampling, as a
  trainer's ``Image.open(...).convert("RGB")`` decodes. An image shrunk less than 2x is decoded at full
  scale, so its resized pixels are the trainer's resize of the original.
- ``reduced``: the same scale with libjpeg's fast IDCT and plain chroma upsampling (Pillow's draft decoder
  flag). Cheaper per pixel; the pixels differ from ``exact`` by a few levels at edges (README: the measured
  PSNR and largest error). WebP has no scaled decode in Pillow, so WebP is decoded whole on both paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from PIL import Image, ImageFile

__all__ = ["DECODE_PATHS", "DecodePath"]

DecodePath = Literal["exact", "reduced"]


def _exact(img: Image.Image, size: tuple[int, int]) -> None:
    img.draft("RGB", size)


def _reduced(img: Image.Image, size: tuple[int, int]) -> None:
    if img.draft("RGB", size) is not None and isinstance(img, ImageFile.ImageFile):
        # Pillow's JPEG decoder takes (scale, draft): draft selects JDCT_FASTEST and no fancy upsampling
        img.decoderconfig = (img.decoderconfig[0], 1)


#: ``--decode`` values and how each sets up the decode of a JPEG that will be downsized.
DECODE_PATHS: dict[str, Callable[[Image.Image, tuple[int, int]], None]] = {
    "exact": _exact,
    "reduced": _reduced,
}
