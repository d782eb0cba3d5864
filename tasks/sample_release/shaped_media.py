"""The media of the v3-shaped release (:mod:`.shaped`): small JPEGs, every one its own object, and tiny clips.

Images are cut from the photos in the scikit-image wheel at a few sizes (a few dozen bases, made once a
process); image ``i`` is base ``i % len(bases)`` with a JPEG comment naming ``i`` after the SOI marker, so
every file is unique (its own sha256) for the price of a copy. Clips are a short pan across a photo,
encoded bit-exactly by :func:`.videos.encode_mp4`.
"""

from __future__ import annotations

import functools
import random
import tempfile
from pathlib import Path
from typing import Final

from .images import jpeg_bytes, load

__all__ = ["clip_bytes", "image_bytes"]

_PHOTOS: Final[tuple[str, ...]] = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "retina.jpg")
_SIDES: Final[tuple[int, ...]] = (96, 160, 256, 384)  # longest side of the bases, pixels
_BASES_PER_SIDE: Final[int] = 6


@functools.lru_cache(maxsize=4)
def _bases(seed: int) -> tuple[bytes, ...]:
    from PIL import Image

    rng = random.Random(seed)
    photos = [load(name).convert("RGB") for name in _PHOTOS]
    out = []
    for side in _SIDES:
        for _ in range(_BASES_PER_SIDE):
            p = rng.choice(photos)
            w, h = p.size
            cw, ch = rng.randint(w // 2, w), rng.randint(h // 2, h)
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            scale = side / max(cw, ch)
            size = (max(8, round(cw * scale)), max(8, round(ch * scale)))
            out.append(jpeg_bytes(p.crop((x, y, x + cw, y + ch)).resize(size, Image.Resampling.BILINEAR)))
    return tuple(out)


def image_bytes(i: int, seed: int = 0) -> bytes:
    """JPEG number ``i``: a base image with a comment segment naming ``i`` (unique bytes, same pixels)."""
    bases = _bases(seed)
    base = bases[i % len(bases)]
    comment = f"vlmforge-shaped {seed} {i}".encode()
    return base[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + base[2:]


def clip_bytes(j: int, frames: int = 12, size: tuple[int, int] = (96, 64)) -> bytes:
    """Clip number ``j``: ``frames`` frames of a pan across a photo, H.264 MP4, 12 fps."""
    from .videos import encode_mp4

    im = load(_PHOTOS[j % len(_PHOTOS)]).convert("RGB")
    w, h = im.size
    cw, ch = size
    crops = []
    for k in range(frames):
        t = k / max(1, frames - 1)
        x, y = round(t * (w - cw)), round(t * (h - ch) * 0.5)
        crops.append(im.crop((x, y, x + cw, y + ch)))
    with tempfile.TemporaryDirectory(prefix="vlmforge-clip-") as d:
        path = Path(d) / "clip.mp4"
        encode_mp4(path, crops, fps=12)
        return path.read_bytes()
