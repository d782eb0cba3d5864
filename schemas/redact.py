"""The one rule for keeping secrets out of everything persisted or logged.

Storage options are masked by an ALLOW-list: every value is ``***`` unless its key is known to be harmless
(an endpoint, a region, ``anon``...). A deny-list of secret-sounding words misses the spellings people use
(``headers: {Authorization: "Bearer ..."}`` for fsspec's HTTP filesystem, ``passwd``, ``auth``, a
vendor's own key name); an allow-list fails safe. Nested dicts (``headers``, ``client_kwargs``,
``config_kwargs``) are masked key by key with the same rule; lists and other values under a key not on the
list are masked whole.

Free text (error messages, URLs, log lines) goes through :func:`redact`: URL user info, secret-looking query
parameters and Hugging Face tokens become ``***``; :func:`scrub` also replaces the literal option values.

A value a recipe took from the environment (``${NAME}``, ``tasks/fetch/recipe_env.py``) is a secret wherever
it goes, whatever it looks like: :func:`register_secret` makes :func:`redact` write it back as ``${NAME}``
in every text of this process (a URL, a path, a failure detail, a log line, a manifest cell).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

MASK: Final = "***"

# Keys (any depth, case-insensitive) whose values are never secret and help a reader understand a run.
SAFE_OPTION_KEYS: Final = frozenset(
    {
        "anon",
        "endpoint_url",
        "region_name",
        "region",
        "client_kwargs",
        "config_kwargs",
        "s3_additional_kwargs",
        "use_ssl",
        "verify",
        "requester_pays",
        "default_block_size",
        "default_fill_cache",
        "default_cache_type",
        "block_size",
        "cache_type",
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "version_aware",
        "asynchronous",
        "loop",
        "timeout",
        "connect_timeout",
        "read_timeout",
        "retries",
        "max_attempts",
        "revision",
        "endpoint",
        "addressing_style",
        "signature_version",
    }
)
# Values shorter than this are not scrubbed from free text (replacing "1" or "us" everywhere helps no one).
_MIN_SCRUB_LEN: Final = 4


def _safe(key: object) -> bool:
    return str(key).lower() in SAFE_OPTION_KEYS


def redact_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy safe to record or log: values of keys not on :data:`SAFE_OPTION_KEYS` become ``***``; nested
    mappings are redacted with the same rule."""
    out: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if isinstance(value, Mapping):
            out[key] = redact_options(value)
        elif _safe(key):
            # a harmless key can still carry a credential in a URL (http://user:pw@host, ?sig=...)
            out[key] = redact(value) if isinstance(value, str) else value
        else:
            out[key] = MASK
    return out


def secret_values(options: Mapping[str, Any] | None) -> list[str]:
    """String forms of every value :func:`redact_options` masks: what :func:`scrub` removes from text."""
    out: list[str] = []
    for key, value in (options or {}).items():
        if isinstance(value, Mapping):
            out += secret_values(value)
        elif not _safe(key):
            items = value if isinstance(value, list | tuple) else [value]
            out += [str(v) for v in items if v is not None and len(str(v)) >= _MIN_SCRUB_LEN]
        elif isinstance(value, str) and redact(value) != value:
            out.append(value)  # the whole URL: scrub() then masks it wherever it is quoted
    return out


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
# "Authorization: Bearer xyz" / "Bearer xyz" in a message or a header dump
_BEARER_RE = re.compile(r"(?P<name>\b(?:Bearer|Basic|Token)\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")


# value -> what it is written as (``${NAME}``); set by register_secret in this process. One pattern matches
# every registered value in any spelling an upstream may echo it in (see _spellings), longest first.
_REGISTERED: dict[str, str] = {}
_REGISTERED_ORDER: list[tuple[str, str]] = []
# the pattern and what each of its groups is written as, swapped in whole (read without the lock)
_REGISTERED_SNAPSHOT: tuple[re.Pattern[str], tuple[str, ...]] | None = None
_REGISTERED_LOCK = threading.Lock()


def _spellings(value: str) -> str:
    """A pattern for ``value`` as an upstream may echo it back: any character percent-encoded (its UTF-8
    bytes, either hex case, or encoded twice: ``%2541``), a space as ``+``, and letters in any case (the
    pattern is compiled case-insensitive)."""
    out = []
    for ch in value:
        spellings = [re.escape(ch), "".join(f"%(?:25)?{b:02x}" for b in ch.encode())]
        if ch == " ":
            spellings.append(r"\+")
        out.append("(?:" + "|".join(spellings) + ")")
    return "".join(out)


def register_secret(value: str, written_as: str = MASK) -> None:
    """From now on, :func:`redact` (and so every failure detail, upstream, store record and log line of this
    process) writes ``value`` as ``written_as``, in any spelling: percent-encoded, upper- or lower-cased.
    Values under 4 characters are not registered (replacing "1" everywhere would mangle text and hide
    nothing)."""
    global _REGISTERED_SNAPSHOT
    if len(value) < _MIN_SCRUB_LEN:
        return
    with _REGISTERED_LOCK:
        if _REGISTERED.get(value) == written_as:
            return
        _REGISTERED[value] = written_as
        _REGISTERED_ORDER[:] = sorted(_REGISTERED.items(), key=lambda kv: len(kv[0]), reverse=True)
        alternatives = "|".join(f"({_spellings(v)})" for v, _ in _REGISTERED_ORDER)
        written = tuple(w for _, w in _REGISTERED_ORDER)
        _REGISTERED_SNAPSHOT = (re.compile(alternatives, re.IGNORECASE), written)


def _registered(text: str) -> str:
    snapshot = _REGISTERED_SNAPSHOT
    if snapshot is None:
        return text
    pattern, written = snapshot  # one capturing group per registered value, in this order
    return pattern.sub(lambda m: written[(m.lastindex or 1) - 1], text)


def redact(text: str) -> str:
    """``text`` with credentials in URLs (user info, secret query parameters), bearer tokens and HF tokens
    replaced by ``***``, and values taken from the environment (:func:`register_secret`) by their
    ``${NAME}``: applied to every failure detail, URL and log line the pipeline records."""
    if not text:
        return text
    text = _registered(text)
    if "@" in text:
        text = _USERINFO_RE.sub(rf"\g<scheme>{MASK}@", text)
    if "=" in text:
        text = _SECRET_PARAM_RE.sub(rf"\g<name>{MASK}", text)
    if "hf_" in text:
        text = _HF_TOKEN_RE.sub("hf_***", text)
    if "Bearer" in text or "Basic" in text or "Token" in text:
        text = _BEARER_RE.sub(rf"\g<name>{MASK}", text)
    return text


def redact_url(url: str | None) -> str | None:
    """:func:`redact` for an optional URL."""
    return None if url is None else redact(url)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """:func:`redact` plus every literal secret of ``secrets`` (e.g. :func:`secret_values`) replaced."""
    for value in sorted(secrets, key=len, reverse=True):
        if value and value in text:
            text = text.replace(value, MASK)
    return redact(text)
