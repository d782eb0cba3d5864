"""A real HTTP/1.1 server on 127.0.0.1 for fetch tests and benchmarks: keep-alive, Range requests, and
fault modes per path (404, 429/503 with Retry-After, 500 then success, slow body, stalled body, truncated
chunked body, wrong Content-Length, an HTML error page served as image/jpeg, a hang until released, a
server that ignores Range, redirects, 401/403/502, a connection reset) and a flaky mode that makes a share
of all requests misbehave at random (seeded). It records every request (with its Host and Authorization
headers) and every TCP connection it accepted.

    with HttpFixture() as srv:
        srv.add("/a.jpg", data)
        srv.add("/b.jpg", data, Fault("429", times=1, retry_after="1"))
        srv.url("/a.jpg")
"""

from __future__ import annotations

import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

HTML_ERROR_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Rate limited</title></head>"
    b"<body><h1>Too many requests</h1><p>Please slow down.</p></body></html>\n"
)
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass
class Fault:
    """How a path misbehaves. ``times``: only the first N requests misbehave (None: all of them)."""

    # 401 403 404 429 500 502 503 slow stall truncated cut bad_length html hang no_range chunked redirect
    # delay reset (RST before any response) headers (the file, with ``headers`` added to the answer)
    kind: str
    times: int | None = None
    retry_after: str | None = None
    delay: float = 0.0
    target: str | None = None  # redirect Location
    pieces: int = 10  # slow: body sent in this many pieces, ``delay`` apart
    headers: tuple[tuple[str, str], ...] = ()  # headers: sent with the file, each pair as one header line


@dataclass(frozen=True)
class Flaky:
    """Every request (to any path without its own fault) misbehaves with probability ``rate``, picking one of
    ``kinds`` at random; ``seed`` makes the sequence of draws reproducible."""

    rate: float = 0.3
    kinds: tuple[str, ...] = ("500", "502", "503", "reset", "cut", "slow")
    seed: int = 0
    slow_delay: float = 0.02  # slow: the body in 10 pieces this far apart
    stall: float = 0.0  # > 0 adds "stall": headers, then silence this long before the body


@dataclass
class Request:
    method: str
    path: str
    range: str | None
    host: str | None = None
    authorization: str | None = None
    user_agent: str | None = None
    fault: str | None = None  # the fault injected into this request, if any
    status: int = 0
    sent: int = 0
    complete: bool = False  # the whole response body was written
    t_start: float = 0.0
    t_end: float = 0.0


@dataclass
class _State:
    files: dict[str, bytes] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    log: list[Request] = field(default_factory=list)
    connections: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    hang_reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    flaky: Flaky | None = None
    rng: random.Random = field(default_factory=random.Random)
    injected: dict[str, int] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.state.lock:
            self.server.state.connections += 1

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
        pass

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        st = self.server.state
        path = self.path.split("?", 1)[0]
        rec = Request(
            self.command,
            path,
            self.headers.get("Range"),
            host=self.headers.get("Host"),
            authorization=self.headers.get("Authorization"),
            user_agent=self.headers.get("User-Agent"),
            t_start=time.monotonic(),
        )
        with st.lock:
            st.log.append(rec)
            n = st.hits[path] = st.hits.get(path, 0) + 1
            st.in_flight += 1
            st.max_in_flight = max(st.max_in_flight, st.in_flight)
            fault = st.faults.get(path)
            data = st.files.get(path)
            if (
                fault is None
                and st.flaky is not None
                and data is not None
                and st.rng.random() < st.flaky.rate
            ):
                fl = st.flaky
                kinds = fl.kinds + (("stall",) if fl.stall > 0 else ())
                kind = st.rng.choice(kinds)
                delay = fl.stall if kind == "stall" else fl.slow_delay
                fault = Fault(kind, delay=delay)
                st.injected[kind] = st.injected.get(kind, 0) + 1
                rec.fault = kind
        try:
            if fault is not None and (fault.times is None or n <= fault.times):
                self._fault(fault, data or b"", rec, head)
            elif data is None:
                self._simple(rec, 404, b"not found\n", "text/plain")
            else:
                self._file(rec, data, head, honour_range=True)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            rec.t_end = time.monotonic()
            with st.lock:
                st.in_flight -= 1

    # ------------------------------------------------------------------------------------------ helpers

    def _send(self, rec: Request, body: bytes) -> None:
        self.wfile.write(body)
        rec.sent += len(body)

    def _simple(
        self, rec: Request, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None
    ) -> None:
        rec.status = status
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self._send(rec, body)
        rec.complete = True

    def _file(
        self,
        rec: Request,
        data: bytes,
        head: bool,
        honour_range: bool,
        extra: tuple[tuple[str, str], ...] = (),
    ) -> None:
        rng = self.headers.get("Range") if honour_range else None
        start, end = 0, len(data) - 1
        status = 200
        if rng:
            m = _RANGE.match(rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                self._simple(rec, 416, b"", "text/plain", {"Content-Range": f"bytes */{len(data)}"})
                return
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), len(data) - 1) if m.group(2) else len(data) - 1
            else:
                start = max(0, len(data) - int(m.group(2)))
            if start >= len(data):
                self._simple(rec, 416, b"", "text/plain", {"Content-Range": f"bytes */{len(data)}"})
                return
            status = 206
        body = data[start : end + 1]
        rec.status = status
        self.send_response(status)
        self.send_header("Content-Type", _ctype(rec.path))
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self._send(rec, body)
        rec.complete = True

    def _fault(self, f: Fault, data: bytes, rec: Request, head: bool) -> None:
        st = self.server.state
        kind = f.kind
        if kind == "404":
            self._simple(rec, 404, b"<html><body>404</body></html>", "text/html")
        elif kind in ("401", "403"):
            extra = {"WWW-Authenticate": 'Basic realm="media"'} if kind == "401" else {}
            self._simple(rec, int(kind), b"<html><body>denied</body></html>", "text/html", extra)
        elif kind == "reset":  # RST instead of a response
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        elif kind in ("429", "500", "502", "503"):
            extra = {"Retry-After": f.retry_after} if f.retry_after is not None else {}
            self._simple(rec, int(kind), b"busy\n", "text/plain", extra)
        elif kind == "html":
            self._simple(rec, 200, HTML_ERROR_PAGE, "image/jpeg")
        elif kind == "redirect":
            self._simple(rec, 302, b"", "text/plain", {"Location": f.target or "/"})
        elif kind == "no_range":
            self._file(rec, data, head, honour_range=False)
        elif kind == "headers":
            self._file(rec, data, head, honour_range=True, extra=f.headers)
        elif kind == "delay":
            time.sleep(f.delay)
            self._file(rec, data, head, honour_range=True)
        elif kind in ("slow", "stall", "hang"):
            rec.status = 200
            self.send_response(200)
            self.send_header("Content-Type", _ctype(rec.path))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            if kind == "stall":
                time.sleep(f.delay)
                self._send(rec, data)
            elif kind == "hang":
                half = len(data) // 2
                self._send(rec, data[:half])
                self.wfile.flush()
                st.hang_reached.set()
                st.release.wait(f.delay or 30.0)
                self._send(rec, data[half:])
            else:
                step = max(1, -(-len(data) // f.pieces))
                for i in range(0, len(data), step):
                    self._send(rec, data[i : i + step])
                    self.wfile.flush()
                    time.sleep(f.delay)
            rec.complete = True
        elif kind == "truncated":  # chunked body cut before its last chunk
            rec.status = 200
            self.send_response(200)
            self.send_header("Content-Type", _ctype(rec.path))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            first = data[: len(data) // 2]
            self._send(rec, f"{len(first):x}\r\n".encode() + first + b"\r\n")
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif kind == "cut":  # honest Content-Length, half the body (or range), then the connection drops
            status, body, extra = 200, data, {}
            m = _RANGE.match((self.headers.get("Range") or "").strip())
            if m and (m.group(1) or m.group(2)) and data:
                if m.group(1):
                    start = int(m.group(1))
                    end = min(int(m.group(2)), len(data) - 1) if m.group(2) else len(data) - 1
                else:
                    start, end = max(0, len(data) - int(m.group(2))), len(data) - 1
                status, body = 206, data[start : end + 1]
                extra = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
            rec.status = status
            self.send_response(status)
            self.send_header("Content-Type", _ctype(rec.path))
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self._send(rec, body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif kind == "bad_length":  # Content-Length larger than the body, then the connection closes
            rec.status = 200
            self.send_response(200)
            self.send_header("Content-Type", _ctype(rec.path))
            self.send_header("Content-Length", str(len(data) + 1000))
            self.end_headers()
            self._send(rec, data)
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
        elif kind == "chunked":  # no Content-Length: the size is known only at the end
            rec.status = 200
            self.send_response(200)
            self.send_header("Content-Type", _ctype(rec.path))
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            step = 64 * 1024
            for i in range(0, len(data), step):
                piece = data[i : i + step]
                self._send(rec, f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            rec.complete = True
        else:
            raise ValueError(f"unknown fault {kind!r}")


def _ctype(path: str) -> str:
    ext = path.rsplit(".", 1)[-1].lower()
    return {
        "jpg": "image/jpeg",
        "jpeg": "image/jpeg",
        "png": "image/png",
        "zip": "application/zip",
        "tar": "application/x-tar",
    }.get(ext, "application/octet-stream")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    state: _State

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that hang up early (size caps, timeouts) are part of the tests


class HttpFixture:
    """Start with ``with HttpFixture() as srv`` (or start()/stop()); files and faults can change live."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.state = _State()
        self._server = _Server((host, 0), _Handler)
        self._server.state = self.state
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="http-fixture", daemon=True
        )

    def __enter__(self) -> HttpFixture:
        return self.start()

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.stop()

    def start(self) -> HttpFixture:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.state.release.set()
        self._server.shutdown()
        self._server.server_close()

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    def add(self, path: str, data: bytes, fault: Fault | None = None) -> str:
        with self.state.lock:
            self.state.files[path] = data
            if fault is not None:
                self.state.faults[path] = fault
            else:
                self.state.faults.pop(path, None)
        return self.url(path)

    def fault(self, path: str, fault: Fault | None) -> None:
        with self.state.lock:
            if fault is None:
                self.state.faults.pop(path, None)
            else:
                self.state.faults[path] = fault
            self.state.hits.pop(path, None)

    def flaky(self, plan: Flaky | None) -> None:
        """Make a share of every later request misbehave (None: stop)."""
        with self.state.lock:
            self.state.flaky = plan
            self.state.rng = random.Random(plan.seed if plan is not None else 0)
            self.state.injected = {}

    @property
    def injected(self) -> dict[str, int]:
        """Faults injected by the flaky mode so far, by kind."""
        with self.state.lock:
            return dict(self.state.injected)

    def requests(self, path: str | None = None) -> list[Request]:
        with self.state.lock:
            return [r for r in self.state.log if path is None or r.path == path]

    def completed(self, path: str) -> int:
        """Responses to ``path`` whose whole body was written."""
        return sum(1 for r in self.requests(path) if r.complete and r.status in (200, 206))

    def bytes_sent(self) -> int:
        return sum(r.sent for r in self.requests())

    def reset_log(self) -> None:
        with self.state.lock:
            self.state.log.clear()
            self.state.hits.clear()
            self.state.connections = 0
            self.state.max_in_flight = 0

    @property
    def connections(self) -> int:
        return self.state.connections

    @property
    def max_in_flight(self) -> int:
        return self.state.max_in_flight


def serve_dir_forever(port: int = 0) -> None:  # pragma: no cover - manual use: python tests/http_fixture.py
    import sys
    from pathlib import Path

    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    srv = HttpFixture()
    for p in root.rglob("*"):
        if p.is_file():
            srv.add("/" + p.relative_to(root).as_posix(), p.read_bytes())
    srv.start()
    print(srv.url("/"), flush=True)
    threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    serve_dir_forever()
