"""Pillow opening and decoding of untrusted bytes, with every failure classified as a media reject.

Opening reads the header only, so a decompression bomb is refused before any pixel is decoded; decoding
(``load``) is the verification. Both map Pillow's many exception types onto the manifest's codes:
``not_an_image``, ``unsupported_format``, ``truncated``, ``decode_error``, ``decompression_bomb``,
``too_small``.

Pillow also has its own process-wide bomb ceiling (twice ``Image.MAX_IMAGE_PIXELS``, ~179 MP by default).
When the caller allows more, an image between the two raises :class:`RetryRelaxed`, and the caller runs again
inside :func:`pillow_limit_lifted`, which raises Pillow's ceiling to the caller's limit for that one image
(serialised, since the setting is global, and restored afterwards).
"""

from __future__ import annotations

import io
import re
import threading
import warnings
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from PIL import Image, UnidentifiedImageError

from .formats import ACCEPTED_IMAGE_FORMATS, NEEDS_PLUGIN, openable, other_pillow_format
from .rejects import Reject, short_detail
from .sniff import image_header_dims, image_magic

__all__ = ["RetryRelaxed", "classify_decode_error", "full_decode", "open_header", "pillow_limit_lifted"]

_TRUNCATION_MARKERS = (
    "truncated",
    "unexpected end",
    "premature end",
    "end of file",
    "not enough data",
    "buffer is not large enough",
)
_BOMB_PIXELS = re.compile(r"Image size \((\d+) pixels\)")
_PILLOW_LIMIT_LOCK = threading.Lock()


class RetryRelaxed(Exception):
    """Pillow's own bomb ceiling is below the caller's ``max_image_pixels``: redo with it lifted."""


def classify_decode_error(exc: BaseException) -> Reject:
    """The reject a decoder exception stands for: a bomb, a truncated file, or otherwise a decode error."""
    if isinstance(exc, Reject):
        return exc
    if isinstance(exc, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return Reject("decompression_bomb", short_detail(exc))
    text = str(exc).lower()
    if isinstance(exc, EOFError) or any(marker in text for marker in _TRUNCATION_MARKERS):
        return Reject("truncated", short_detail(exc))
    return Reject("decode_error", short_detail(exc))


def _unidentified(data: bytes, accepted: Collection[str]) -> Reject:
    """None of the accepted formats takes the bytes: a format vlmforge does not accept (or one whose Pillow
    plugin is not installed), not an image at all, an empty one, or a damaged one."""
    magic = image_magic(data)
    plugin_format = NEEDS_PLUGIN.get(magic or "")
    if plugin_format is not None and plugin_format not in openable(accepted):
        return Reject("unsupported_format", f"{plugin_format} (no Pillow plugin for it is installed)")
    if magic is None:
        other = other_pillow_format(data, accepted)
        if other is not None:
            return Reject("unsupported_format", other)
        # the bytes are never quoted (a secret or a private file's first line would land in the manifest)
        return Reject("not_an_image", f"unrecognised content ({len(data)} bytes, {_content_kind(data)})")
    dims = image_header_dims(magic, data)
    if dims is not None and min(dims) == 0:
        return Reject("too_small", f"{magic} header claims {dims[0]}x{dims[1]}")
    return Reject("decode_error", short_detail(f"{magic} signature but unreadable/unsupported"))


def _content_kind(data: bytes) -> str:
    """What unrecognised bytes look like, in words that quote none of them."""
    head = data[:512].lstrip(b"\xef\xbb\xbf \t\r\n")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    if head[:1] in (b"{", b"["):
        return "JSON text"
    return "HTML/XML text" if head[:1] == b"<" else "text"


def open_header(
    data: bytes, max_image_pixels: int, relaxed: bool, accepted: Collection[str] = ACCEPTED_IMAGE_FORMATS
) -> Image.Image:
    """``Image.open`` (header only) restricted to the ``accepted`` formats; failures are rejects.

    A bomb refused by Pillow's ceiling but within ``max_image_pixels`` raises :class:`RetryRelaxed` (when not
    already ``relaxed``)."""
    try:
        return Image.open(io.BytesIO(data), formats=openable(accepted))
    except UnidentifiedImageError as exc:
        raise _unidentified(data, accepted) from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        match = _BOMB_PIXELS.search(str(exc))
        if not relaxed and match is not None and int(match.group(1)) <= max_image_pixels:
            raise RetryRelaxed from exc
        raise Reject("decompression_bomb", short_detail(exc)) from exc
    except Exception as exc:
        raise classify_decode_error(exc) from exc


def full_decode(img: Image.Image, relaxed: bool) -> None:
    """Decode every pixel (the verification step); failures become rejects."""
    try:
        img.load()
    except Exception as exc:
        if isinstance(exc, Image.DecompressionBombError) and not relaxed:
            raise RetryRelaxed from exc
        raise classify_decode_error(exc) from exc


@contextmanager
def pillow_limit_lifted(max_image_pixels: int) -> Iterator[None]:
    """Pillow's bomb ceiling raised to ``max_image_pixels`` (and its warning silenced) inside the block.

    The setting is process-wide, so blocks are serialised and the old value is restored."""
    with _PILLOW_LIMIT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = max(saved or 0, -(-max_image_pixels // 2))
        try:
            yield
        finally:
            Image.MAX_IMAGE_PIXELS = saved
