"""The http stage: a polite, bounded HTTP client (:class:`HttpClient`): per-host limits and a circuit breaker,
backoff with ``Retry-After``, one deadline per request, redirects only where a recipe allows, no internal
address unless declared, opt-out headers honoured, resumable streams; and the failure classes a fetch is
reported with (:class:`FetchError`), which the fetch and archive stages raise too."""

from __future__ import annotations

from .client import HttpClient, HttpOptions
from .failures import (
    BAD_ARCHIVE,
    HASH_MISMATCH,
    HTTP_404,
    MATCH_BUDGET,
    NO_SOURCE,
    NOT_FOUND,
    NOT_IN_ARCHIVE,
    SOURCE_ERROR,
    TIMEOUT,
    TOO_LARGE,
    TRANSIENT,
    TRUNCATED,
    UNSAFE_MEMBER,
    FetchError,
    classify_fs_error,
)
from .opt_out import DISALLOWED_DIRECTIVES
from .policy import check_local_root, check_url
from .resumable import stream
from .retry import retry_call

__all__ = [
    "BAD_ARCHIVE",
    "DISALLOWED_DIRECTIVES",
    "HASH_MISMATCH",
    "HTTP_404",
    "MATCH_BUDGET",
    "NO_SOURCE",
    "NOT_FOUND",
    "NOT_IN_ARCHIVE",
    "SOURCE_ERROR",
    "TIMEOUT",
    "TOO_LARGE",
    "TRANSIENT",
    "TRUNCATED",
    "UNSAFE_MEMBER",
    "FetchError",
    "HttpClient",
    "HttpOptions",
    "check_local_root",
    "check_url",
    "classify_fs_error",
    "retry_call",
    "stream",
]
