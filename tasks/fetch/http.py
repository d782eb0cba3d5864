"""A polite HTTP client for fetching media: pooled keep-alive connections, a concurrency limit per host,
exponential backoff with full jitter, ``Retry-After`` honoured (429/503, seconds or HTTP date, capped), a
timeout per socket operation and per request, a size cap, and a circuit breaker per host.

Every failure is classified (:data:`FAILURE_CLASSES`); only transient classes are retried. Built on urllib3
(already in the stack through botocore and requests): it gives connection pools, chunked decoding and
Content-Length enforcement; retries, politeness and classification are ours, because urllib3's ``Retry``
has no per-host limit, no breaker, and blocks the calling thread without sharing a host's back-off.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TypeVar
from urllib.parse import urljoin, urlsplit

import urllib3
from urllib3 import exceptions as u3

from ..errors import VlmforgeError, redact, redact_url

log = logging.getLogger("vlmforge.fetch")
_T = TypeVar("_T")


class RedactingFilter(logging.Filter):
    """Rewrites a record's message through :func:`redact` (urllib3 logs request lines, query string
    included, at DEBUG level: a signed URL's signature or a ``?token=`` would land in the logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_REDACTING = RedactingFilter()
for _name in ("urllib3.connectionpool", "urllib3.response", "vlmforge.fetch"):
    if _REDACTING not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_REDACTING)

# Failure classes, as written to the manifests (``media.fetch_status``).
DNS_ERROR = "dns_error"
CONNECT_ERROR = "connect_error"
TIMEOUT = "timeout"
HTTP_404 = "http_404"
HTTP_4XX = "http_4xx"  # any other 4xx (403, 410...): the status code is in the detail
HTTP_429 = "http_429"
HTTP_5XX = "http_5xx"
TOO_LARGE = "too_large"
HASH_MISMATCH = "hash_mismatch"
TRUNCATED = "truncated"
HTML_PAGE = "html_page"  # an HTML/XML page where media was expected (error page served with 200)
CIRCUIT_OPEN = "circuit_open"  # the host failed too often; not tried (a later run retries)
NOT_FOUND = "not_found"  # no such file in a local folder or object store
NOT_IN_ARCHIVE = "not_in_archive"
UNSAFE_MEMBER = "unsafe_member"  # archive member that is a link, absolute, or escapes its folder
BAD_ARCHIVE = "bad_archive"  # not a readable zip/tar, unsupported compression or encryption
NO_SOURCE = "no_source"  # no recipe source applies to the reference
SOURCE_ERROR = "source_error"  # anything else a source raised, with its message

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
    NO_SOURCE,
    SOURCE_ERROR,
)
# Retried within a run (with backoff); the rest fail at once. Every failure is retried by a later run.
TRANSIENT: frozenset[str] = frozenset({DNS_ERROR, CONNECT_ERROR, TIMEOUT, HTTP_429, HTTP_5XX, TRUNCATED})
# Count against a host's circuit breaker.
_HOST_FAILURES: frozenset[str] = TRANSIENT - {TRUNCATED}

_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 256 * 1024


class FetchError(VlmforgeError):
    """One failed fetch: ``failure`` is a class of :data:`FAILURE_CLASSES`, ``detail`` says what happened."""

    def __init__(
        self, failure: str, detail: str, *, url: str | None = None, retry_after: float | None = None
    ) -> None:
        detail = redact(detail)
        super().__init__(f"{failure}: {detail}")
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
        self.args = (f"{self.failure}: {self._detail}",)

    @property
    def url(self) -> str | None:
        return self._url

    @url.setter
    def url(self, value: str | None) -> None:
        self._url = redact_url(value)

    @property
    def transient(self) -> bool:
        return self.failure in TRANSIENT


class Resolver(Protocol):
    def __call__(self, host: str) -> str: ...


@dataclass(frozen=True)
class StaticResolver:
    """Host -> IP overrides (curl ``--resolve``), e.g. hosts pre-resolved once per run. Hosts not listed
    go to the system resolver, unless ``only`` is set: then they fail as ``dns_error`` (tests, air gaps)."""

    hosts: Mapping[str, str]
    only: bool = False

    def __call__(self, host: str) -> str:
        ip = self.hosts.get(host.lower())
        if ip is not None:
            return ip
        if self.only:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is not in the static resolver")
        return host


@dataclass(frozen=True)
class HttpOptions:
    """Politeness and limits of one client (shared by every thread of a worker process)."""

    per_host: int = 8  # requests in flight per host (also the keep-alive pool size per host)
    connect_timeout: float = 10.0
    read_timeout: float = 30.0  # per socket read
    request_timeout: float = 300.0  # wall time of one attempt, headers to last byte
    max_bytes: int = 512 * 1024 * 1024
    retries: int = 4  # extra attempts for transient failures
    backoff_base: float = 0.5  # first backoff ceiling in seconds (doubles per attempt, full jitter)
    backoff_max: float = 60.0
    retry_after_max: float = 600.0  # a longer Retry-After fails the reference for this run
    breaker_failures: int = 20  # consecutive transient failures that open a host's circuit
    breaker_cooldown: float = 120.0  # seconds a circuit stays open before one probe is let through
    max_redirects: int = 5
    user_agent: str = "vlmforge/0.1 (media fetch for VLM training data; polite: per-host limits, backoff)"
    resolver: Resolver | None = None
    seed: int | None = None  # jitter seed (tests)


@dataclass
class Response:
    """A completed GET. ``body`` is empty when a sink received the bytes."""

    url: str  # final URL after redirects
    status: int
    headers: dict[str, str]
    body: bytes
    nbytes: int
    attempts: int
    total_size: int | None = None  # from Content-Range on a range request


@dataclass
class _Host:
    slots: threading.BoundedSemaphore
    limit: int
    pause_until: float = 0.0
    failures: int = 0
    open_until: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Sink(Protocol):
    """Receives a body in chunks; ``reset`` is called before a retried attempt writes again."""

    def write(self, data: bytes) -> Any: ...

    def reset(self) -> None: ...


class _Buffer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def reset(self) -> None:
        self.parts.clear()

    def value(self) -> bytes:
        return b"".join(self.parts)


def looks_like_html(head: bytes) -> bool:
    """True when the first bytes of a body are an HTML or XML page (error pages served as media)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:64].lower()
    return start.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml", b"<error"))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), None when absent/invalid."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


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


class HttpClient:
    """Thread-safe; create one per worker process and share it across batches and threads."""

    def __init__(self, options: HttpOptions | None = None) -> None:
        self.options = options or HttpOptions()
        self._pools: dict[tuple[str, str, int], urllib3.HTTPConnectionPool] = {}
        self._hosts: dict[str, _Host] = {}
        self._limits: dict[str, int] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(self.options.seed)
        self.bytes_received = 0
        self.requests = 0

    # ----------------------------------------------------------------------------------------- politeness

    def set_host_limit(self, host: str, limit: int) -> None:
        """Lower (or raise) the in-flight limit of one host, e.g. from a recipe's ``max_concurrency``."""
        with self._lock:
            self._limits[host.lower()] = limit
            state = self._hosts.get(host.lower())
            if state is not None and state.limit != limit:
                self._hosts[host.lower()] = _Host(threading.BoundedSemaphore(limit), limit)

    def _host(self, host: str) -> _Host:
        key = host.lower()
        with self._lock:
            state = self._hosts.get(key)
            if state is None:
                limit = self._limits.get(key, self.options.per_host)
                state = self._hosts[key] = _Host(threading.BoundedSemaphore(limit), limit)
            return state

    @contextmanager
    def _slot(self, host: str, deadline: float | None = None) -> Iterator[_Host]:
        """One of ``host``'s in-flight slots, after any pause its Retry-After asked for. With ``deadline``
        (``time.monotonic()`` value) waiting for a slot or a pause past it fails as ``timeout``."""
        state = self._host(host)
        now = time.monotonic()
        if state.open_until > now:
            raise FetchError(
                CIRCUIT_OPEN,
                f"{host}: {state.failures} consecutive failures; circuit open for "
                f"{state.open_until - now:.0f} s more",
            )
        if deadline is None:
            state.slots.acquire()
        elif not state.slots.acquire(timeout=max(0.0, deadline - now)):
            raise FetchError(TIMEOUT, f"{host}: no free connection slot before the batch deadline")
        try:
            while True:  # a 429/503 Retry-After pauses the whole host, not just one request
                wait = state.pause_until - time.monotonic()
                if wait <= 0:
                    break
                if deadline is not None and time.monotonic() + wait > deadline:
                    raise FetchError(
                        TIMEOUT, f"{host} asked to wait {wait:.0f} s (Retry-After), past the batch deadline"
                    )
                time.sleep(min(wait, 1.0))
            yield state
        finally:
            state.slots.release()

    def _record(self, state: _Host, err: FetchError | None, host: str) -> None:
        with state.lock:
            if err is None:
                state.failures = 0
                state.open_until = 0.0
                return
            if err.retry_after is not None and err.failure in (HTTP_429, HTTP_5XX):
                state.pause_until = max(state.pause_until, time.monotonic() + err.retry_after)
            if err.failure in _HOST_FAILURES:
                state.failures += 1
                if state.failures >= self.options.breaker_failures:
                    state.open_until = time.monotonic() + self.options.breaker_cooldown
                    log.warning(
                        "circuit open for %s after %d consecutive failures (last: %s)",
                        host,
                        state.failures,
                        err,
                    )

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """Delay before attempt ``attempt + 1``: Retry-After when given, else full jitter."""
        if retry_after is not None:
            return retry_after + self._rng.uniform(0, min(1.0, 0.1 * retry_after))
        ceiling = min(self.options.backoff_max, self.options.backoff_base * 2 ** (attempt - 1))
        return self._rng.uniform(0, ceiling)

    # ------------------------------------------------------------------------------------------- requests

    def get(
        self,
        url: str,
        *,
        byte_range: tuple[int, int] | None = None,
        suffix: int | None = None,
        sink: Sink | None = None,
        max_bytes: int | None = None,
        expect_media: bool = False,
        deadline: float | None = None,
    ) -> Response:
        """GET ``url`` with retries. ``byte_range`` is inclusive (start, end); ``suffix`` asks for the last
        N bytes. Raises FetchError (its ``attempts`` set) when every attempt failed.

        ``deadline`` (a ``time.monotonic()`` value, e.g. a batch's) bounds the whole call: no attempt starts
        and no backoff sleeps past it, and an attempt's body read stops there (``timeout``)."""

        def attempt_once(attempt: int) -> Response:
            if sink is not None and attempt > 1:
                sink.reset()
            if deadline is not None and time.monotonic() >= deadline:
                raise FetchError(TIMEOUT, f"batch deadline reached before attempt {attempt}", url=url)
            resp = self._get_once(url, byte_range, suffix, sink, max_bytes, expect_media, deadline)
            resp.attempts = attempt
            return resp

        return self._retrying(attempt_once, deadline, cap_retry_after=True, log_url=url)

    def _retrying(
        self,
        attempt_once: Callable[[int], _T],
        deadline: float | None,
        *,
        attempts_before: int = 0,
        cap_retry_after: bool = False,
        deadline_note: str | None = None,
        log_url: str | None = None,
    ) -> _T:
        """The retry policy shared by :meth:`get`, :meth:`stream` and :func:`retry_call`.

        Calls ``attempt_once(n)`` for n = ``attempts_before`` + 1, + 2... until it returns. A transient
        FetchError is retried after :meth:`backoff`, at most ``options.retries`` times in all; the error that
        ends the loop is raised with its ``attempts`` set. No backoff sleeps past ``deadline`` (a
        ``time.monotonic()`` value): such an error is raised with ``deadline_note`` (default: "not retried:
        the batch deadline comes before attempt N") added to its detail. With ``cap_retry_after`` a
        Retry-After over ``options.retry_after_max`` is not waited for; with ``log_url`` each retry is
        logged at DEBUG level."""
        attempt = attempts_before
        while True:
            attempt += 1
            try:
                return attempt_once(attempt)
            except FetchError as err:
                err.attempts = attempt
                if not err.transient or attempt > self.options.retries:
                    raise
                if (
                    cap_retry_after
                    and err.retry_after is not None
                    and err.retry_after > self.options.retry_after_max
                ):
                    err.detail += (
                        f" (Retry-After {err.retry_after:.0f} s exceeds the cap; left for a later run)"
                    )
                    raise
                delay = self.backoff(attempt, err.retry_after)
                if deadline is not None and time.monotonic() + delay >= deadline:
                    next_one = f" (not retried: the batch deadline comes before attempt {attempt + 1})"
                    err.detail += next_one if deadline_note is None else deadline_note
                    raise
                if log_url is not None:
                    log.debug("retry %d of %s in %.2f s after %s", attempt, redact(log_url), delay, err)
                time.sleep(delay)

    def _pool(self, scheme: str, host: str, port: int) -> urllib3.HTTPConnectionPool:
        key = (scheme, host.lower(), port)
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                return pool
        resolver = self.options.resolver
        try:
            address = resolver(host) if resolver is not None else host
        except OSError as exc:
            raise FetchError(DNS_ERROR, f"{host}: {exc}") from None
        kw: dict[str, Any] = {
            "maxsize": self._limits.get(host.lower(), self.options.per_host),
            "block": False,
            "retries": False,
        }
        if scheme == "https":
            if address != host:
                kw |= {"server_hostname": host, "assert_hostname": host}
            new: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(address, port, **kw)
        else:
            new = urllib3.HTTPConnectionPool(address, port, **kw)
        with self._lock:
            return self._pools.setdefault(key, new)

    def _get_once(
        self,
        url: str,
        byte_range: tuple[int, int] | None,
        suffix: int | None,
        sink: Sink | None,
        max_bytes: int | None,
        expect_media: bool,
        deadline: float | None = None,
    ) -> Response:
        current = url
        for _ in range(self.options.max_redirects + 1):
            parts = urlsplit(current)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchError(SOURCE_ERROR, f"not an http(s) URL: {current}", url=url)
            host = parts.hostname
            with self._slot(host, deadline) as state:
                try:
                    result = self._request(
                        current, parts, byte_range, suffix, sink, max_bytes, expect_media, deadline
                    )
                except FetchError as err:
                    err.url = err.url or url
                    self._record(state, err, host)
                    raise
                self._record(state, None, host)
            if isinstance(result, str):
                current = urljoin(current, result)
                continue
            result.url = current
            return result
        raise FetchError(HTTP_4XX, f"more than {self.options.max_redirects} redirects", url=url)

    def _request(
        self,
        url: str,
        parts: Any,
        byte_range: tuple[int, int] | None,
        suffix: int | None,
        sink: Sink | None,
        max_bytes: int | None,
        expect_media: bool,
        batch_deadline: float | None = None,
    ) -> Response | str:
        opts = self.options
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pool = self._pool(parts.scheme, parts.hostname, port)
        default_port = port == (443 if parts.scheme == "https" else 80)
        headers = {
            "Host": parts.hostname if default_port else f"{parts.hostname}:{port}",
            "User-Agent": opts.user_agent,
            "Accept-Encoding": "identity",
        }
        if byte_range is not None:
            headers["Range"] = f"bytes={byte_range[0]}-{byte_range[1]}"
        elif suffix is not None:
            headers["Range"] = f"bytes=-{suffix}"
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        cap = opts.max_bytes if max_bytes is None else max_bytes
        deadline = time.monotonic() + opts.request_timeout
        if batch_deadline is not None:
            deadline = min(deadline, batch_deadline)
        remaining = max(0.001, deadline - time.monotonic())
        timeout = urllib3.Timeout(
            connect=min(opts.connect_timeout, remaining), read=min(opts.read_timeout, remaining)
        )
        try:
            r = pool.urlopen(
                "GET",
                path,
                headers=headers,
                retries=False,
                redirect=False,
                preload_content=False,
                decode_content=False,
                timeout=timeout,
                assert_same_host=False,
            )
        except Exception as exc:  # noqa: BLE001 - classified into a failure class
            raise classify_exception(exc, url) from None
        with self._lock:
            self.requests += 1
        try:
            return self._read(r, url, byte_range, suffix, sink, cap, deadline, expect_media)
        finally:
            r.release_conn()

    def _read(
        self,
        r: urllib3.BaseHTTPResponse,
        url: str,
        byte_range: tuple[int, int] | None,
        suffix: int | None,
        sink: Sink | None,
        cap: int,
        deadline: float,
        expect_media: bool,
    ) -> Response | str:
        status = r.status
        hdrs = {k.lower(): v for k, v in r.headers.items()}
        if status in _REDIRECTS and hdrs.get("location"):
            r.drain_conn()
            return hdrs["location"]
        if status >= 400 or status < 200 or status in _REDIRECTS:
            _discard(r)
            retry_after = parse_retry_after(hdrs.get("retry-after"))
            if status == 404:
                raise FetchError(HTTP_404, "404 Not Found", url=url)
            if status == 429:
                raise FetchError(HTTP_429, "429 Too Many Requests", url=url, retry_after=retry_after)
            if status == 408:
                raise FetchError(TIMEOUT, "408 Request Timeout", url=url)
            if status >= 500:
                raise FetchError(
                    HTTP_5XX, f"{status} {r.reason or ''}".strip(), url=url, retry_after=retry_after
                )
            raise FetchError(HTTP_4XX, f"{status} {r.reason or ''}".strip(), url=url)
        ranged = byte_range is not None or suffix is not None
        total_size = None
        if ranged:
            if status != 206:
                _discard(r)
                raise FetchError(
                    SOURCE_ERROR, f"range request answered {status} (server ignores Range)", url=url
                )
            total_size = _content_range_total(hdrs.get("content-range"))
        length = hdrs.get("content-length")
        declared = int(length) if length and length.isdigit() else None
        if declared is not None and declared > cap:
            _discard(r)
            raise FetchError(TOO_LARGE, f"Content-Length {declared} exceeds the cap of {cap} bytes", url=url)
        buf = _Buffer() if sink is None else None
        out: Sink = sink if sink is not None else buf  # type: ignore[assignment]
        n = 0
        first = True
        try:
            # read1: one socket read per call (at most read_timeout each), so the request deadline is
            # checked however slowly the body drips in (stream()/read() would block until a chunk fills).
            while chunk := r.read1(_CHUNK, decode_content=False):
                if first and expect_media and looks_like_html(chunk):
                    _discard(r)
                    ctype = hdrs.get("content-type", "?")
                    raise FetchError(HTML_PAGE, f"an HTML page was served (Content-Type {ctype})", url=url)
                first = False
                n += len(chunk)
                if n > cap:
                    _discard(r)
                    raise FetchError(TOO_LARGE, f"body exceeds the cap of {cap} bytes", url=url)
                if time.monotonic() > deadline:
                    _discard(r)
                    raise FetchError(
                        TIMEOUT,
                        f"body still arriving at the deadline "
                        f"({self.options.request_timeout:.0f} s per request, or the batch's; {n} bytes)",
                        url=url,
                    )
                out.write(chunk)
        except FetchError:
            raise
        except Exception as exc:  # noqa: BLE001
            _discard(r)
            raise classify_exception(exc, url, reading_body=True) from None
        finally:
            with self._lock:
                self.bytes_received += n
        if declared is not None and n != declared:
            raise FetchError(TRUNCATED, f"got {n} of {declared} bytes", url=url)
        short = byte_range is not None and n != byte_range[1] - byte_range[0] + 1
        if short and byte_range is not None and (total_size is None or byte_range[1] < total_size):
            raise FetchError(TRUNCATED, f"range returned {n} bytes, asked for {byte_range}", url=url)
        return Response(
            url=url,
            status=status,
            headers=hdrs,
            body=buf.value() if buf is not None else b"",
            nbytes=n,
            attempts=1,
            total_size=total_size,
        )

    @contextmanager
    def stream(
        self, url: str, *, max_bytes: int | None = None, deadline: float | None = None
    ) -> Iterator[BinaryIO]:
        """A readable stream of ``url``'s body that resumes with Range requests after a dropped connection
        (tar archives are read once, front to back). Reads raise FetchError; with ``deadline`` (a
        ``time.monotonic()`` value) a read or a retry past it raises ``timeout``."""
        stream = _ResumingStream(
            self, url, max_bytes if max_bytes is not None else self.options.max_bytes, deadline
        )
        try:
            yield stream  # type: ignore[misc]
        finally:
            stream.close()

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()


def _discard(r: urllib3.BaseHTTPResponse) -> None:
    """Drop a response we will not read: close its connection rather than download the rest."""
    with contextlib.suppress(Exception):  # closing a broken connection may raise again
        r.close()


def _content_range_total(value: str | None) -> int | None:
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None


class _ResumingStream:
    """File-like body of one URL, re-requested from the current offset (Range) after a transient error."""

    def __init__(self, client: HttpClient, url: str, cap: int, deadline: float | None = None) -> None:
        self.client, self.url, self.cap, self.deadline = client, url, cap, deadline
        self.pos = 0
        self.size: int | None = None
        self._resp: urllib3.BaseHTTPResponse | None = None
        self._broken = False  # the connection failed after a partial read: reopen before reading again
        self._attempt = 0
        self._host: str = urlsplit(url).hostname or ""

    def readable(self) -> bool:
        return True

    def _open(self) -> urllib3.BaseHTTPResponse:
        # self._attempt counts on across reopenings: read() stops resuming once it passes the retries.
        return self.client._retrying(
            self._open_once,
            self.deadline,
            attempts_before=self._attempt,
            cap_retry_after=True,  # as get(): a server asking for an hour's pause is left for a later run
            deadline_note=" (not retried: the batch deadline comes first)",
        )

    def _open_once(self, attempt: int) -> urllib3.BaseHTTPResponse:
        self._attempt = attempt
        self._check_deadline()
        client = self.client
        for _ in range(client.options.max_redirects + 1):
            parts = urlsplit(self.url)
            self._host = parts.hostname or ""
            with client._slot(self._host, self.deadline) as state:
                try:
                    r = self._request(parts)
                except FetchError as err:
                    client._record(state, err, self._host)
                    raise
                client._record(state, None, self._host)
            if isinstance(r, str):
                self.url = urljoin(self.url, r)
                continue
            return r
        raise FetchError(HTTP_4XX, "too many redirects", url=self.url)

    def _check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise FetchError(TIMEOUT, f"batch deadline reached at byte {self.pos}", url=self.url)

    def _request(self, parts: Any) -> urllib3.BaseHTTPResponse | str:
        client = self.client
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise FetchError(SOURCE_ERROR, f"not an http(s) URL: {self.url}", url=self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pool = client._pool(parts.scheme, parts.hostname, port)
        default_port = port == (443 if parts.scheme == "https" else 80)
        headers = {  # never parts.netloc: it carries user:password@
            "Host": parts.hostname if default_port else f"{parts.hostname}:{port}",
            "User-Agent": client.options.user_agent,
            "Accept-Encoding": "identity",
        }
        if self.pos:
            headers["Range"] = f"bytes={self.pos}-"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        timeout = urllib3.Timeout(connect=client.options.connect_timeout, read=client.options.read_timeout)
        try:
            r = pool.urlopen(
                "GET",
                path,
                headers=headers,
                retries=False,
                redirect=False,
                preload_content=False,
                decode_content=False,
                timeout=timeout,
                assert_same_host=False,
            )
        except Exception as exc:  # noqa: BLE001
            raise classify_exception(exc, self.url) from None
        if r.status in _REDIRECTS and r.headers.get("location"):
            r.drain_conn()
            r.release_conn()
            return str(r.headers["location"])
        if r.status == 416 and self.pos:
            _discard(r)
            raise FetchError(TRUNCATED, f"the server has no bytes past {self.pos} (shorter than announced)")
        if r.status >= 400:
            _discard(r)
            retry_after = parse_retry_after(r.headers.get("retry-after"))
            if r.status == 404:
                raise FetchError(HTTP_404, "404 Not Found", url=self.url)
            if r.status == 429:
                raise FetchError(HTTP_429, "429 Too Many Requests", url=self.url, retry_after=retry_after)
            if r.status >= 500:
                raise FetchError(HTTP_5XX, f"{r.status}", url=self.url, retry_after=retry_after)
            raise FetchError(HTTP_4XX, f"{r.status}", url=self.url)
        if self.pos and r.status != 206:
            _discard(r)
            raise FetchError(TRUNCATED, f"connection dropped at byte {self.pos} and the server cannot resume")
        length = r.headers.get("content-length")
        if length and length.isdigit():
            self.size = self.pos + int(length)
            if self.size > self.cap:
                _discard(r)
                raise FetchError(TOO_LARGE, f"{self.size} bytes exceed the cap of {self.cap}", url=self.url)
        return r

    def _read_some(self, resp: urllib3.BaseHTTPResponse, n: int) -> bytes:
        """Up to ``n`` bytes (all when ``n < 0``), short only at the end of the body: one socket read at a
        time, so the deadline is checked however slowly the body drips in."""
        parts: list[bytes] = []
        got = 0
        while n < 0 or got < n:
            self._check_deadline()
            try:
                piece = resp.read1(_CHUNK if n < 0 else min(_CHUNK, n - got), decode_content=False)
            except Exception:
                if not parts:
                    raise
                self._broken = True  # hand over what arrived; the next read resumes from there
                break
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)

    def read(self, n: int = -1) -> bytes:
        while True:
            if self._resp is None:
                if self.size is not None and self.pos >= self.size:
                    return b""
                self._resp = self._open()
            try:
                data = self._read_some(self._resp, n)
            except Exception as exc:  # noqa: BLE001
                err = classify_exception(exc, self.url, reading_body=True)
                _discard(self._resp)
                self._resp = None
                if err.failure == TIMEOUT and self.deadline is not None and time.monotonic() >= self.deadline:
                    raise err from None  # the batch deadline: no resume
                if not err.transient or self._attempt > self.client.options.retries:
                    raise err from None
                continue  # resume from self.pos
            with self.client._lock:
                self.client.bytes_received += len(data)
            if self._broken and self._resp is not None:
                self._broken = False
                _discard(self._resp)
                self._resp = None
            if not data and n != 0:
                if self.size is not None and self.pos < self.size:  # short body without an exception
                    if self._resp is not None:
                        _discard(self._resp)
                    self._resp = None
                    if self._attempt > self.client.options.retries:
                        raise FetchError(TRUNCATED, f"got {self.pos} of {self.size} bytes", url=self.url)
                    continue
                return b""
            self.pos += len(data)
            if self.pos > self.cap:
                raise FetchError(TOO_LARGE, f"body exceeds the cap of {self.cap} bytes", url=self.url)
            return bytes(data)

    def close(self) -> None:
        if self._resp is not None:
            _discard(self._resp)
            self._resp.release_conn()
            self._resp = None


def retry_call(
    fn: Callable[[], Any],
    classify: Callable[[BaseException], FetchError],
    client: HttpClient,
    deadline: float | None = None,
) -> tuple[Any, int]:
    """Run ``fn`` with the client's retry policy (for object stores); returns (result, attempts). With
    ``deadline`` (a ``time.monotonic()`` value) no attempt starts and no backoff sleeps past it."""

    def attempt_once(attempt: int) -> tuple[Any, int]:
        try:
            if deadline is not None and time.monotonic() >= deadline:
                raise FetchError(TIMEOUT, f"batch deadline reached before attempt {attempt}")
            return fn(), attempt
        except Exception as exc:  # noqa: BLE001
            raise classify(exc) from None

    return client._retrying(attempt_once, deadline)
