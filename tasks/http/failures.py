"""Fetch failure classes: what a failed reference is called in ``media.fetch_status``, and how an exception
(urllib3, socket, fsspec / s3fs / HfFileSystem) or an HTTP status becomes one.

The classes are entries of :data:`~vlmforge.schemas.reasons.REASONS` (level ``fetch``); the constants below
are looked up there, so a class that is not registered fails at import. Only :data:`TRANSIENT` classes are
retried within a run; every failure is retried by a later run.
"""

from __future__ import annotations

import re
import socket

from urllib3 import exceptions as u3

from ...schemas.reasons import REASONS, reason
from ...schemas.redact import redact, redact_url
from ..errors import VlmforgeError

DNS_ERROR = REASONS["dns_error"].code
CONNECT_ERROR = REASONS["connect_error"].code
TIMEOUT = REASONS["timeout"].code
HTTP_404 = REASONS["http_404"].code
HTTP_4XX = REASONS["http_4xx"].code  # any other 4xx (403, 410...): the status code is in the detail
HTTP_429 = REASONS["http_429"].code
HTTP_5XX = REASONS["http_5xx"].code
TOO_LARGE = REASONS["too_large"].code
HASH_MISMATCH = REASONS["hash_mismatch"].code
TRUNCATED = REASONS["truncated"].code
HTML_PAGE = REASONS[
    "html_page"
].code  # an HTML/XML page where media was expected (error page served with 200)
CIRCUIT_OPEN = REASONS["circuit_open"].code  # the host failed too often; not tried (a later run retries)
NOT_FOUND = REASONS["not_found"].code  # no such file in a local folder or object store
NOT_IN_ARCHIVE = REASONS["not_in_archive"].code
UNSAFE_MEMBER = REASONS[
    "unsafe_member"
].code  # archive member that is a link, absolute, or escapes its folder
BAD_ARCHIVE = REASONS["bad_archive"].code  # not a readable zip/tar, unsupported compression or encryption
INTERNAL_ADDRESS = REASONS[
    "internal_address"
].code  # a url on an internal address the recipe does not declare
ROOT_NOT_ALLOWED = REASONS["root_not_allowed"].code  # a local root outside the folders a run may read
NOT_MEDIA = REASONS["not_media"].code  # JSON, text... where media was expected: never stored nor quoted
NO_SOURCE = REASONS["no_source"].code  # no recipe source applies to the reference
SOURCE_ERROR = REASONS["source_error"].code  # anything else a source raised, with its message
MATCH_BUDGET = REASONS["match_budget"].code  # a source's match regex not run to its end on the reference
OPTED_OUT = REASONS["opted_out"].code  # the server's X-Robots-Tag forbids the use (tasks/http/opt_out.py)

FAILURE_CLASSES: tuple[str, ...] = (
    DNS_ERROR,
    CONNECT_ERROR,
    TIMEOUT,
    HTTP_404,
    HTTP_4XX,
    HTTP_429,
    HTTP_5XX,
    TOO_LARGE,
    HASH_MISMATCH,
    TRUNCATED,
    HTML_PAGE,
    CIRCUIT_OPEN,
    NOT_FOUND,
    NOT_IN_ARCHIVE,
    UNSAFE_MEMBER,
    BAD_ARCHIVE,
    INTERNAL_ADDRESS,
    ROOT_NOT_ALLOWED,
    NOT_MEDIA,
    NO_SOURCE,
    SOURCE_ERROR,
    MATCH_BUDGET,
    OPTED_OUT,
)
# Retried within a run (with backoff); the rest fail at once. Every failure is retried by a later run.
TRANSIENT: frozenset[str] = frozenset({DNS_ERROR, CONNECT_ERROR, TIMEOUT, HTTP_429, HTTP_5XX, TRUNCATED})
# Count against a host's circuit breaker.
HOST_FAILURES: frozenset[str] = TRANSIENT - {TRUNCATED}


class FetchError(VlmforgeError):
    """One failed fetch: ``failure`` is a class of :data:`FAILURE_CLASSES`, ``detail`` says what happened."""

    def __init__(
        self, failure: str, detail: str, *, url: str | None = None, retry_after: float | None = None
    ) -> None:
        detail = redact(detail)
        super().__init__(_message(failure, detail))
        self.failure = failure
        self._detail = detail
        self._url = redact_url(url)
        self.retry_after = retry_after
        self.attempts = 1

    # detail and url are redacted whenever they are set (credentials never reach a manifest or a log)
    @property
    def detail(self) -> str:
        return self._detail

    @detail.setter
    def detail(self, value: str) -> None:
        self._detail = redact(value)
        self.args = (_message(self.failure, self._detail),)

    @property
    def url(self) -> str | None:
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        self._url = redact_url(value)

    @property
    def transient(self) -> bool:
        return self.failure in TRANSIENT


def _message(failure: str, detail: str) -> str:
    """``failure: detail`` for a registered failure class (KeyError for an unregistered one)."""
    return f"{reason(failure)}: {detail}"


#: Content types that are never media (a web API's answer, a text file, a page).
_NON_MEDIA_TYPES = ("application/json", "text/", "application/xml", "application/javascript", "+json", "+xml")


def non_media_body(head: bytes, content_type: str | None) -> str | None:
    """What a body that is not media is, from its Content-Type or its first bytes (JSON or text), or None.
    The answer names the kind and the Content-Type, never the bytes."""
    ctype = (content_type or "").split(";", 1)[0].strip().lower()
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:512]
    if any(marker in ctype for marker in _NON_MEDIA_TYPES) and not _binary(start):
        return f"Content-Type {ctype}"
    if start[:1] in (b"{", b"[") and not _binary(start):
        return f"JSON (Content-Type {ctype or 'none'})"
    # judged from the bytes only on a first chunk long enough to say (a dripped body comes a byte at a time)
    if len(start) >= 16 and not _binary(start) and not re.match(rb"P[1-7]\s", start):  # ASCII PNM is text
        return f"text (Content-Type {ctype or 'none'})"
    return None


def _binary(head: bytes) -> bool:
    """Bytes no text has: control characters other than whitespace, or invalid UTF-8."""
    if re.search(rb"[\x00-\x08\x0e-\x1f\x7f]", head):
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a multi-byte character cut by the chunk's end is still text
        return exc.reason != "unexpected end of data"
    return False


def looks_like_html(head: bytes) -> bool:
    """True when the first bytes of a body are an HTML or XML page (error pages served as media)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:64].lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml", b"<error"))


def status_error(status: int, reason: str, url: str, retry_after: float | None) -> FetchError:
    """The failure of an HTTP answer that is not a success (nor a redirect being followed)."""
    text = f"{status} {reason}".strip()
    if status == 404:
        return FetchError(HTTP_404, "404 Not Found", url=url)
    if status == 429:
        return FetchError(HTTP_429, "429 Too Many Requests", url=url, retry_after=retry_after)
    if status == 408:
        return FetchError(TIMEOUT, "408 Request Timeout", url=url)
    if status >= 500:
        return FetchError(HTTP_5XX, text, url=url, retry_after=retry_after)
    return FetchError(HTTP_4XX, text, url=url)


def classify_exception(exc: BaseException, url: str, *, reading_body: bool = False) -> FetchError:
    """The failure class of a urllib3/socket exception."""
    if isinstance(exc, FetchError):
        return exc
    inner_arg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else None
    text = " ".join((inner_arg if isinstance(exc, u3.ProtocolError) and inner_arg else str(exc)).split())[
        :300
    ]
    if isinstance(exc, u3.NameResolutionError | socket.gaierror):
        return FetchError(DNS_ERROR, text, url=url)
    # urllib3's NewConnectionError subclasses ConnectTimeoutError: test it first.
    if isinstance(exc, u3.NewConnectionError | ConnectionRefusedError):
        inner = exc.__context__ or exc.__cause__
        if isinstance(inner, socket.gaierror):
            return FetchError(DNS_ERROR, text, url=url)
        if isinstance(inner, TimeoutError | socket.timeout):
            return FetchError(TIMEOUT, text, url=url)
        return FetchError(CONNECT_ERROR, text, url=url)
    if isinstance(exc, u3.ConnectTimeoutError | u3.ReadTimeoutError | TimeoutError | socket.timeout):
        return FetchError(TIMEOUT, text, url=url)
    if isinstance(exc, u3.SSLError):
        return FetchError(CONNECT_ERROR, f"tls: {text}", url=url)
    if isinstance(exc, u3.ProtocolError | u3.IncompleteRead | u3.InvalidChunkLength):
        return FetchError(TRUNCATED if reading_body else CONNECT_ERROR, text, url=url)
    if isinstance(exc, u3.LocationParseError | u3.LocationValueError | ValueError):
        return FetchError(SOURCE_ERROR, f"bad URL: {text}", url=url)
    if isinstance(exc, OSError | u3.HTTPError):
        return FetchError(CONNECT_ERROR, text, url=url)
    return FetchError(SOURCE_ERROR, f"{type(exc).__name__}: {text}", url=url)


def classify_fs_error(exc: BaseException, url: str) -> FetchError:
    """The failure class of an fsspec (s3fs / HfFileSystem / local) error."""
    if isinstance(exc, FetchError):
        return exc
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    if isinstance(exc, FileNotFoundError):
        if "://" not in url or url.startswith("file://"):
            return FetchError(NOT_FOUND, f"no such file ({text})", url=url)
        return FetchError(HTTP_404, f"no such object ({text})", url=url)
    if isinstance(exc, PermissionError):
        return FetchError(HTTP_4XX, f"access denied ({text})", url=url)
    if isinstance(exc, TimeoutError) or "timeout" in text.lower():
        return FetchError(TIMEOUT, text, url=url)
    low = text.lower()
    if "slowdown" in low or "503" in low or "internalerror" in low or " 500" in low:
        return FetchError(HTTP_5XX, text, url=url)
    if isinstance(exc, ConnectionError) or "connect" in low:
        return FetchError(CONNECT_ERROR, text, url=url)
    return FetchError(SOURCE_ERROR, text, url=url)
