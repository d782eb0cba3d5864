"""How a bad image or video becomes a reject: a registered media code plus a short detail.

Every check in the media package raises :class:`Reject` (or returns a result carrying ``reason`` and
``detail``) instead of letting a decoder's exception escape: a broken file is a manifest row, never a crashed
batch. The codes come from :data:`vlmforge.schemas.reasons.REASONS` (level ``media``), looked up when a reject
is made, so a misspelt code fails at once instead of reaching a manifest; the detail is one line, bounded, so
a decoder that dumps a page of text cannot bloat the manifests.
"""

from __future__ import annotations

from ...schemas.reasons import REASONS

__all__ = ["Reject", "media_reason", "short_detail"]

_DETAIL_MAX = 200


def media_reason(code: str) -> str:
    """``code`` after checking that it is a registered media-level reason (``KeyError`` otherwise)."""
    entry = REASONS[code]
    if entry.level != "media":
        raise KeyError(f"{code!r} is a {entry.level}-level reason, not a media one")
    return entry.code


def short_detail(exc: BaseException | str) -> str:
    """One line of at most 200 characters saying what failed (an exception as ``Type: message``)."""
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


class Reject(Exception):
    """The file is refused with ``reason`` (a registered media code) and an optional ``detail``."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = media_reason(reason)
        self.detail = detail
