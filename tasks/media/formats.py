"""Which image and video formats vlmforge accepts, and the name of a real format it does not.

Pillow reads some forty formats and libav several hundred containers; a training sample should only carry
what a trainer's image and video loaders decode reliably. :data:`ACCEPTED_IMAGE_FORMATS` (Pillow format
names) and :data:`ACCEPTED_VIDEO_CONTAINERS` (libav demuxer names) are the one list of each: the media stage
opens nothing else, and a file in a format that exists but is not on the list is refused as
``unsupported_format: <FORMAT>`` rather than as unrecognised content. ``process_image(accepted_formats=...)``
widens the image list for one call; a run widens it with ``--accept-image-format FMT``
(``MediaOptions.extra_image_formats``, through :func:`accepted_image_formats`).
"""

from __future__ import annotations

import io
from collections.abc import Collection

from PIL import Image

__all__ = [
    "ACCEPTED_IMAGE_FORMATS",
    "accepted_image_formats",
    "ACCEPTED_VIDEO_CONTAINERS",
    "IMAGE_CONTAINERS",
    "NEEDS_PLUGIN",
    "openable",
    "other_pillow_format",
]

#: Pillow formats the media stage opens. EPS (runs Ghostscript), font/animation oddities, scientific and
#: write-only formats are left out on purpose: untrusted bytes only reach well-exercised raster decoders.
ACCEPTED_IMAGE_FORMATS: tuple[str, ...] = (
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
    "HEIF",
    "JXL",
    "JPEG2000",
    "SGI",
    "PCX",
    "ICNS",
    "DDS",
    "PSD",
)

#: libav demuxers (``container.format.name``) whose video streams are accepted: the containers trainers'
#: video loaders (Energon's ``AVDecoder``, decord, torchvision) seek and decode. Flash (``swf``), raw
#: elementary streams and image sequences are not among them.
ACCEPTED_VIDEO_CONTAINERS: frozenset[str] = frozenset(
    {
        "mov,mp4,m4a,3gp,3g2,mj2",
        "matroska,webm",
        "avi",
        "flv",
        "mpeg",
        "mpegts",
        "ogg",
        "asf",
    }
)

#: libav demuxers that read still or animated images: such a file is ``not_a_video``.
IMAGE_CONTAINERS: frozenset[str] = frozenset({"image2", "gif", "webp", "apng"})

#: Signature names (``sniff.image_magic``) of formats Pillow reads only through a plugin, and that plugin's
#: Pillow format name: without the plugin such a file is ``unsupported_format``, not a damaged file.
NEEDS_PLUGIN: dict[str, str] = {"heif": "HEIF", "avif": "AVIF", "jxl": "JXL"}

Image.init()


def accepted_image_formats(extra: Collection[str] = ()) -> tuple[str, ...]:
    """:data:`ACCEPTED_IMAGE_FORMATS` widened by ``extra`` (Pillow format names, any case), the list's
    order first. A name this Pillow cannot open is a ValueError naming the formats it can."""
    wanted = [name.strip().upper() for name in extra]
    unknown = sorted({name for name in wanted if name not in Image.OPEN})
    if unknown:
        known = ", ".join(sorted(Image.OPEN))
        raise ValueError(f"image format(s) {', '.join(unknown)} unknown to Pillow; it opens: {known}")
    return tuple(dict.fromkeys((*ACCEPTED_IMAGE_FORMATS, *wanted)))


def openable(accepted: Collection[str]) -> tuple[str, ...]:
    """The formats of ``accepted`` this Pillow can open (MPO is reached through JPEG's factory)."""
    return tuple(f for f in accepted if f in Image.OPEN)


def other_pillow_format(data: bytes, accepted: Collection[str]) -> str | None:
    """The Pillow format ``data`` is in when it is one Pillow reads but ``accepted`` leaves out (None when
    no other format takes it). Formats with a signature check are tried first and only their headers are
    parsed; then, as Pillow's own ``open`` does, those without one (IM, SPIDER, PCD, TGA, ...), which would
    claim stray bytes by their header alone, so they count only when Pillow also decodes the pixels. No
    external program (Ghostscript) runs."""
    prefix = data[:16]
    signed = [f for f in Image.ID if f not in accepted and Image.OPEN[f][1] is not None]
    unsigned = [f for f in Image.ID if f not in accepted and Image.OPEN[f][1] is None]
    for fmt in signed:
        accept = Image.OPEN[fmt][1]
        try:
            if accept is None or not accept(prefix):
                continue
            with Image.open(io.BytesIO(data), formats=(fmt,)):
                return fmt
        except Exception:
            continue
    for fmt in unsigned:
        try:
            with Image.open(io.BytesIO(data), formats=(fmt,)) as im:  # raises on a decompression bomb
                im.load()
                return fmt
        except Exception:
            continue
    return None
