"""A polite HTTP client for fetching media: pooled keep-alive connections, a timeout per socket operation and
per request, a size cap, an HTML-page check, and the per-host politeness of :mod:`.hosts` and the retry
policy of :mod:`.retry` around every attempt.

Built on urllib3 (already in the stack through botocore and requests): it gives connection pools, chunked
decoding and Content-Length enforcement; retries, politeness and classification are ours, because urllib3's
``Retry`` has no per-host limit, no breaker, and blocks the calling thread without sharing a host's
back-off. Tar archives are read through :func:`.resumable.stream`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import SplitResult, urljoin, urlsplit

import urllib3

from ...schemas.redact import redact
from .failures import (
    DNS_ERROR,
    HTML_PAGE,
    HTTP_4XX,
    NOT_MEDIA,
    OPTED_OUT,
    SOURCE_ERROR,
    TIMEOUT,
    TOO_LARGE,
    TRUNCATED,
    FetchError,
    classify_exception,
    looks_like_html,
    non_media_body,
    status_error,
)
from .hosts import HostTable
from .opt_out import DEFAULT_USER_AGENT, DISALLOWED_DIRECTIVES, opted_out, robots_token
from .redirects import DEFAULT_POLICY, redirect_refusal, same_origin
from .request_watch import WatchedHTTPConnection, WatchedHTTPSConnection, watched
from .retry import RetryPolicy, parse_retry_after

log = logging.getLogger("vlmforge.fetch")

REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 256 * 1024


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
    # wall time of one attempt: connect, status line, headers, every redirect and the body (enforced by
    # request_watch.py's watchdog, whatever the server sends and however slowly)
    request_timeout: float = 300.0
    max_bytes: int = 512 * 1024 * 1024
    retries: int = 4  # extra attempts for transient failures
    backoff_base: float = 0.5  # first backoff ceiling in seconds (doubles per attempt, full jitter)
    backoff_max: float = 60.0
    retry_after_max: float = 600.0  # a longer Retry-After fails the reference for this run
    breaker_failures: int = 20  # consecutive transient failures that open a host's circuit
    breaker_cooldown: float = 120.0  # seconds a circuit stays open before one probe is let through
    max_redirects: int = 5
    user_agent: str | None = None  # None: DEFAULT_USER_AGENT (the config's default says so)
    # X-Robots-Tag directives that opt a media answer out (opt_out.py); () honours none
    disallowed_directives: tuple[str, ...] = DISALLOWED_DIRECTIVES
    resolver: Resolver | None = None
    seed: int | None = None  # jitter seed (tests)

    @property
    def agent(self) -> str:
        """The User-Agent sent: the one given, else vlmforge's own."""
        return self.user_agent or DEFAULT_USER_AGENT


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


@dataclass(frozen=True)
class _Ask:
    """What one GET asks for (the same on every attempt and redirect)."""

    byte_range: tuple[int, int] | None
    suffix: int | None
    sink: Sink | None
    cap: int
    expect_media: bool
    redirects: str = DEFAULT_POLICY  # the source's redirect policy (redirects.py)
    headers: tuple[tuple[str, str], ...] = ()  # the source's own headers (a token): sent to its origin only
    method: str = "GET"  # HEAD: headers only (sizing without a body)

    @property
    def ranged(self) -> bool:
        return self.byte_range is not None or self.suffix is not None

    def range_header(self) -> str | None:
        if self.byte_range is not None:
            return f"bytes={self.byte_range[0]}-{self.byte_range[1]}"
        return None if self.suffix is None else f"bytes=-{self.suffix}"


class HttpClient:
    """Thread-safe; create one per worker process and share it across batches and threads."""

    def __init__(self, options: HttpOptions | None = None) -> None:
        self.options = opts = options or HttpOptions()
        self.hosts = HostTable(opts.per_host, opts.breaker_failures, opts.breaker_cooldown)
        self.retry = RetryPolicy(
            opts.retries, opts.backoff_base, opts.backoff_max, opts.retry_after_max, opts.seed
        )
        self._pools: dict[tuple[str, str, int], urllib3.HTTPConnectionPool] = {}
        self._lock = threading.Lock()
        self.bytes_received = 0
        self.requests = 0

    def count_received(self, n: int) -> None:
        with self._lock:
            self.bytes_received += n

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
        redirects: str = DEFAULT_POLICY,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        """GET ``url`` with retries. ``byte_range`` is inclusive (start, end); ``suffix`` asks for the last
        N bytes. Raises FetchError (its ``attempts`` set) when every attempt failed.

        ``deadline`` (a ``time.monotonic()`` value, e.g. a batch's) bounds the whole call: no attempt starts
        and no backoff sleeps past it, and an attempt's body read stops there (``timeout``). Each attempt has
        its own deadline too (``request_timeout``), over connect, headers, redirects and body.
        ``redirects`` is the source's redirect policy (:mod:`.redirects`); ``headers`` (a token) go to the
        URL's own origin only (scheme, host and port), never to another one a redirect leads to."""
        cap = self.options.max_bytes if max_bytes is None else max_bytes
        extra = tuple((headers or {}).items())
        return self._with_retries(
            url, _Ask(byte_range, suffix, sink, cap, expect_media, redirects, extra), deadline
        )

    def head(self, url: str, *, deadline: float | None = None, redirects: str = DEFAULT_POLICY) -> Response:
        """HEAD ``url`` with the same redirect policy, host slots, deadlines and retries as :meth:`get`; no
        body is read (``nbytes`` 0, the headers say the size)."""
        return self._with_retries(url, _Ask(None, None, None, 0, False, redirects, method="HEAD"), deadline)

    def _with_retries(self, url: str, ask: _Ask, deadline: float | None) -> Response:
        """``ask`` of ``url`` under the retry policy; no attempt starts past ``deadline``, and a sink is
        emptied before each attempt after the first."""

        def attempt_once(attempt: int) -> Response:
            if ask.sink is not None and attempt > 1:
                ask.sink.reset()
            if deadline is not None and time.monotonic() >= deadline:
                raise FetchError(TIMEOUT, f"deadline reached before attempt {attempt}", url=url)
            resp = self._get_once(url, ask, deadline)
            resp.attempts = attempt
            return resp

        return self.retry.run(attempt_once, deadline, cap_retry_after=True, log_url=url)

    def _get_once(self, url: str, ask: _Ask, batch_deadline: float | None) -> Response:
        """One attempt, following redirects, each hop inside its host's slot; one deadline for the attempt
        (from its first slot: waiting for a busy host is bounded by the batch deadline only)."""
        origin = current_parts = urlsplit(url)
        current = url
        deadline: float | None = None
        for hop in range(self.options.max_redirects + 1):
            parts = urlsplit(current)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchError(SOURCE_ERROR, f"not an http(s) URL: {redact(current)}", url=url)
            if hop:
                refusal = redirect_refusal(origin, current_parts, parts, ask.redirects, self.options.resolver)
                if refusal:
                    raise FetchError(SOURCE_ERROR, f"{refusal}: {redact(current)}", url=url)
            current_parts = parts
            host = parts.hostname
            with self.hosts.slot(host, deadline or batch_deadline) as state:
                if deadline is None:
                    deadline = time.monotonic() + self.options.request_timeout
                    if batch_deadline is not None:
                        deadline = min(deadline, batch_deadline)
                # a token goes to the recipe URL's own scheme, host and port only
                hop_ask = ask if same_origin(parts, origin) or not ask.headers else replace(ask, headers=())
                try:
                    result = self._request(current, parts, hop_ask, deadline)
                except FetchError as err:
                    err.url = err.url or url
                    self.hosts.record(state, err, host)
                    raise
                self.hosts.record(state, None, host)
            if isinstance(result, str):
                current = urljoin(current, result)
                continue
            result.url = current
            return result
        raise FetchError(HTTP_4XX, f"more than {self.options.max_redirects} redirects", url=url)

    def _request(self, url: str, parts: SplitResult, ask: _Ask, deadline: float) -> Response | str:
        """One request: the response, or the Location of a redirect. Every socket operation of it is cut at
        ``deadline`` by the watchdog (:mod:`.request_watch`), so a server dripping its status line or
        headers cannot hold the thread past it."""
        opts = self.options
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FetchError(TIMEOUT, self._deadline_words("before the request"), url=url)
        timeout = urllib3.Timeout(
            connect=min(opts.connect_timeout, remaining), read=min(opts.read_timeout, remaining)
        )
        with watched(deadline) as watch:
            r: urllib3.BaseHTTPResponse | None = None
            try:
                r = self.open(parts, ask.range_header(), timeout, url, dict(ask.headers), method=ask.method)
                result = self._read(r, url, ask, deadline)
                if watch.expired:  # a body cut by the watchdog can look complete (read until close)
                    raise FetchError(TIMEOUT, self._deadline_words("body still arriving"), url=url)
                return result
            except FetchError as err:
                if watch.expired and err.failure != TIMEOUT:
                    phase = "status line or headers" if r is None else "body"
                    raise FetchError(
                        TIMEOUT, self._deadline_words(f"{phase} still arriving"), url=url
                    ) from None
                raise
            finally:
                if r is not None:
                    if watch.expired:
                        discard(r)
                    r.release_conn()

    def _deadline_words(self, what: str) -> str:
        return (
            f"{what} at the request deadline ({self.options.request_timeout:g} s per request over connect, "
            "status line, headers, redirects and body, or the batch's)"
        )

    def open(
        self,
        parts: SplitResult,
        range_header: str | None,
        timeout: urllib3.Timeout,
        url: str,
        extra_headers: Mapping[str, str] | None = None,
        method: str = "GET",
    ) -> urllib3.BaseHTTPResponse:
        """Send one GET (or HEAD) on the host's pool (no retries, no redirects followed, body not read)."""
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        pool = self._pool(parts.scheme, host, port)
        default_port = port == (443 if parts.scheme == "https" else 80)
        headers = {  # never parts.netloc: it carries user:password@
            "Host": host if default_port else f"{host}:{port}",
            "User-Agent": self.options.agent,
            "Accept-Encoding": "identity",
        }
        if range_header is not None:
            headers["Range"] = range_header
        headers = dict(extra_headers or {}) | headers  # ours win: a recipe cannot set Host or Range
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            r = pool.urlopen(
                method,
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
        return r

    def _read(self, r: urllib3.BaseHTTPResponse, url: str, ask: _Ask, deadline: float) -> Response | str:
        status = r.status
        hdrs = {k.lower(): v for k, v in r.headers.items()}
        if status in REDIRECTS and hdrs.get("location"):
            discard(r)  # a redirect's body is never read, however small it says it is
            return hdrs["location"]
        if status >= 400 or status < 200 or status in REDIRECTS:
            discard(r)
            raise status_error(status, r.reason or "", url, parse_retry_after(hdrs.get("retry-after")))
        if ask.method == "HEAD":
            r.drain_conn()
            return Response(url, status, hdrs, b"", 0, attempts=1)
        self._check_opt_out(r, url)
        total_size = None
        if ask.ranged:
            if status != 206:
                discard(r)
                raise FetchError(
                    SOURCE_ERROR, f"range request answered {status} (server ignores Range)", url=url
                )
            total_size = content_range_total(hdrs.get("content-range"))
        length = hdrs.get("content-length")
        declared = int(length) if length and length.isdigit() else None
        if declared is not None and declared > ask.cap:
            discard(r)
            raise FetchError(
                TOO_LARGE, f"Content-Length {declared} exceeds the cap of {ask.cap} bytes", url=url
            )
        buf = _Buffer() if ask.sink is None else None
        n = self._read_body(r, url, ask, deadline, hdrs, ask.sink or buf)  # type: ignore[arg-type]
        if declared is not None and n != declared:
            raise FetchError(TRUNCATED, f"got {n} of {declared} bytes", url=url)
        byte_range = ask.byte_range
        short = byte_range is not None and n != byte_range[1] - byte_range[0] + 1
        if short and byte_range is not None and (total_size is None or byte_range[1] < total_size):
            raise FetchError(TRUNCATED, f"range returned {n} bytes, asked for {byte_range}", url=url)
        body = buf.value() if buf is not None else b""
        return Response(url, status, hdrs, body, n, attempts=1, total_size=total_size)

    def _check_opt_out(self, r: urllib3.BaseHTTPResponse, url: str) -> None:
        """An answer whose X-Robots-Tag forbids our use is ``opted_out``: its body is never read."""
        directives = self.options.disallowed_directives
        if not directives:
            return
        token = robots_token(self.options.agent)
        found = opted_out(r.headers.getlist("X-Robots-Tag"), token, directives)
        if found is not None:
            discard(r)
            raise FetchError(OPTED_OUT, f"X-Robots-Tag {found}", url=url)

    def _read_body(
        self,
        r: urllib3.BaseHTTPResponse,
        url: str,
        ask: _Ask,
        deadline: float,
        hdrs: dict[str, str],
        out: Sink,
    ) -> int:
        """Copy the body into ``out``; returns its length. Stops at the cap, at the deadline, and on an
        HTML page where media was expected."""
        n = 0
        first = True
        try:
            # read1: one socket read per call (at most read_timeout each), so the request deadline is
            # checked however slowly the body drips in (stream()/read() would block until a chunk fills).
            while chunk := r.read1(CHUNK, decode_content=False):
                if first and ask.expect_media and looks_like_html(chunk):
                    discard(r)
                    ctype = hdrs.get("content-type", "?")
                    raise FetchError(HTML_PAGE, f"an HTML page was served (Content-Type {ctype})", url=url)
                if first and ask.expect_media and (kind := non_media_body(chunk, hdrs.get("content-type"))):
                    discard(r)  # never stored, never quoted: the kind and the Content-Type only
                    raise FetchError(NOT_MEDIA, f"not media: {kind}", url=url)
                first = False
                n += len(chunk)
                if n > ask.cap:
                    discard(r)
                    raise FetchError(TOO_LARGE, f"body exceeds the cap of {ask.cap} bytes", url=url)
                if time.monotonic() > deadline:
                    discard(r)
                    # the same words as the watchdog's cut: whichever sees the deadline first says it
                    raise FetchError(
                        TIMEOUT, self._deadline_words(f"body still arriving ({n} bytes)"), url=url
                    )
                out.write(chunk)
        except FetchError:
            raise
        except Exception as exc:  # noqa: BLE001
            discard(r)
            raise classify_exception(exc, url, reading_body=True) from None
        finally:
            self.count_received(n)
        return n

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
        kw: dict[str, Any] = {"maxsize": self.hosts.limit(host), "block": False, "retries": False}
        if scheme == "https":
            if address != host:
                kw |= {"server_hostname": host, "assert_hostname": host}
            new: urllib3.HTTPConnectionPool = urllib3.HTTPSConnectionPool(address, port, **kw)
        else:
            new = urllib3.HTTPConnectionPool(address, port, **kw)
        # connections enlisted with each request's deadline (request_watch.py)
        new.ConnectionCls = WatchedHTTPSConnection if scheme == "https" else WatchedHTTPConnection
        with self._lock:
            return self._pools.setdefault(key, new)

    def close(self) -> None:
        with self._lock:
            for pool in self._pools.values():
                pool.close()
            self._pools.clear()


def discard(r: urllib3.BaseHTTPResponse) -> None:
    """Drop a response we will not read: close its connection rather than download the rest."""
    with contextlib.suppress(Exception):  # closing a broken connection may raise again
        r.close()


def content_range_total(value: str | None) -> int | None:
    if not value or "/" not in value:
        return None
    total = value.rsplit("/", 1)[1].strip()
    return int(total) if total.isdigit() else None
