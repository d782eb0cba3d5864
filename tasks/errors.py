"""The project's own error types. The CLI turns these (and only these) into one-line messages."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any


class VlmforgeError(Exception):
    """Base of every error the CLI reports without a traceback. String arguments are passed through
    :func:`redact`, so a URL's credentials never reach a message, a log or a manifest."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(redact(a) if isinstance(a, str) else a for a in args))


class ReleaseError(VlmforgeError):
    """The release cannot be read as a whole (missing folder, unknown subset...)."""


class ConfigError(VlmforgeError):
    """An option or option combination is invalid."""


class OutputError(VlmforgeError):
    """The output folder cannot be used as asked."""


class GateFailed(VlmforgeError):
    """One or more subsets failed their quality gate and were held back."""


# ------------------------------------------------------------------------------------------- redaction

# scheme://user:password@host -> scheme://***@host (a user name alone may be a token too)
_USERINFO_RE = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")
# ?token=...&X-Amz-Signature=... -> the value of any query parameter naming a secret becomes ***
_SECRET_PARAM_RE = re.compile(
    r"(?P<name>[?&;](?:[^=&;#\s]*?)(?:token|signature|sig|secret|password|passwd|pwd|key|credential|auth)"
    r"[^=&;#\s]*=)(?P<value>[^&;#\s]+)",
    re.IGNORECASE,
)
# Hugging Face user/org access tokens wherever they appear
_HF_TOKEN_RE = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")


def redact(text: str) -> str:
    """``text`` with credentials in URLs (user info, secret query parameters) and HF tokens replaced by
    ``***``: applied to every failure detail, URL and log line this module and the fetch stage record."""
    if not text:
        return text
    if "@" in text:
        text = _USERINFO_RE.sub(r"\g<scheme>***@", text)
    if "=" in text:
        text = _SECRET_PARAM_RE.sub(r"\g<name>***", text)
    if "hf_" in text:
        text = _HF_TOKEN_RE.sub("hf_***", text)
    return text


def redact_url(url: str | None) -> str | None:
    """:func:`redact` for an optional URL."""
    return None if url is None else redact(url)


_SECRET_WORDS = ("secret", "token", "password", "passwd", "key", "credential", "session", "auth")


def secret_values(options: Mapping[str, Any] | None) -> list[str]:
    """String values of storage-option keys that name a secret (``secret``, ``token``, ``key``...), nested
    dicts included: what :func:`scrub` removes from messages."""
    out: list[str] = []
    for k, v in (options or {}).items():
        if isinstance(v, Mapping):
            out += secret_values(v)
        elif isinstance(v, str) and len(v) >= 4 and any(w in str(k).lower() for w in _SECRET_WORDS):
            out.append(v)
    return out


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """:func:`redact` plus every literal secret of ``secrets`` (e.g. :func:`secret_values`) replaced."""
    for value in sorted(secrets, key=len, reverse=True):
        if value and value in text:
            text = text.replace(value, "***")
    return redact(text)
