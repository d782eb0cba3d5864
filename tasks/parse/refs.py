"""Media references as the JSONL writes them: which are safe to follow, and their matching form.

A record may only point at files inside its own release folder, or at URLs whose scheme the subset's media
recipe allows; ``file`` and ``data`` URLs are never followed (they read this machine or inline bytes). The
fetch stage applies the same rule (:func:`unsafe_ref_reason`) to archive members, and matches references
against files and tar members in their :func:`normalize_ref` form.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection

from ...schemas.reasons import reason
from .invalid import Invalid

_SCHEMES = ("http://", "https://", "file://", "s3://", "gs://", "hf://", "ftp://", "data:")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# Schemes never followed even when a recipe lists them: they read this machine or inline bytes.
_NEVER_ALLOWED = frozenset({"file", "data", "local"})
NO_SCHEMES: frozenset[str] = frozenset()


def unsafe_ref_reason(ref: str, allowed_schemes: Collection[str] = NO_SCHEMES) -> str | None:
    """Why a media reference may not be followed, or None when it is safe.

    Safe: a relative path that stays in its folder, or a URL whose scheme the subset's media recipe allows
    (``allowed_schemes``, e.g. ``{"https", "s3"}``; ``file`` and ``data`` are never allowed).
    """
    if not ref or not ref.strip():
        return "empty reference"
    if "\x00" in ref:
        return "NUL byte in reference"
    low = ref.lower()
    if low.startswith(_SCHEMES) or "://" in low:
        return _url_reason(low, allowed_schemes)
    if ref.startswith(("/", "\\")) or (len(ref) > 1 and ref[1] == ":"):
        return "absolute path"
    if ".." in ref.replace("\\", "/").split("/"):
        return "path escapes its folder ('..')"
    return None


def _url_reason(low: str, allowed_schemes: Collection[str]) -> str | None:
    m = _SCHEME_RE.match(low)
    scheme = m.group(1) if m else ""
    if scheme and scheme in allowed_schemes and scheme not in _NEVER_ALLOWED:
        return None
    if allowed_schemes:
        return f"URL scheme {scheme or '?'!r} is not allowed by this subset's media recipe"
    return "URL references need a media recipe that allows them"


def check_ref(ref: str, allowed: Collection[str]) -> None:
    """Raise an ``unsafe_ref`` :class:`Invalid` when ``ref`` may not be followed."""
    # Fast path for the common plain relative path; anything unusual gets the full check.
    if ref and ":" not in ref and ".." not in ref and "\x00" not in ref and ref[0] not in "/\\ \t":
        return
    bad = unsafe_ref_reason(ref, allowed)
    if bad:
        raise Invalid(reason("unsafe_ref", f"{printable(ref[:200])} ({bad})"))


def printable(text: str) -> str:
    """``text`` with control and other non-printable characters escaped (``\\x00``), for reasons."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def normalize_ref(ref: str) -> str:
    """The path form used for matching against files and tar members (``./a//b`` -> ``a/b``)."""
    return posixpath.normpath(ref.replace("\\", "/")).lstrip("/")
