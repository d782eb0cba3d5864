"""A hostile HTTP server on 127.0.0.1 for deadline and redirect tests: per path it drips its status line, its
headers or a redirect's endless body one byte per ``pace`` seconds, for as long as the client listens, or
redirects to another port, another host name, a link-local address or a loopback address.

It records, per connection, when the client went away (``closed`` events), so a test can wait for the
client's thread to let go of the socket instead of sleeping."""

from __future__ import annotations

import io
import socket
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType


def _jpeg() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.effect_noise((64, 64), 60).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


JPEG = _jpeg()  # a real image, so a run's media stage accepts /ok.jpg


CLOSE_EMPTY = "Content-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass
class Conn:
    path: str = ""
    opened: float = 0.0
    sent: int = 0
    closed: threading.Event = field(default_factory=threading.Event)  # the client hung up
    closed_at: float = 0.0

    @property
    def held(self) -> float:
        """Seconds the client held the connection (until now while it is open)."""
        return (self.closed_at if self.closed.is_set() else time.monotonic()) - self.opened


class DripServer:
    def __init__(self, pace: float = 1.0) -> None:
        self.pace = pace
        self.redirects: dict[str, str] = {}  # path -> Location
        self.conns: list[Conn] = []
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def __enter__(self) -> DripServer:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._sock.close()

    def conns_for(self, path: str) -> list[Conn]:
        with self._lock:
            return [c for c in self.conns if c.path == path]

    # ------------------------------------------------------------------------------------------- serving

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        conn = Conn(opened=time.monotonic())
        with self._lock:
            self.conns.append(conn)
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                piece = sock.recv(4096)
                if not piece:
                    return
                request += piece
            conn.path = request.split(b" ", 2)[1].decode()
            self._answer(sock, conn)
        except OSError:
            pass
        finally:
            conn.closed_at = time.monotonic()
            conn.closed.set()
            sock.close()

    def _drip(self, sock: socket.socket, conn: Conn, data: bytes, forever: bytes | None = None) -> None:
        """Send ``data`` one byte per pace, then ``forever`` (repeated) the same way, until the client hangs
        up (a send fails, or a read sees end-of-file) or the server stops."""
        sock.settimeout(self.pace)

        def gone() -> bool:
            try:
                return sock.recv(1, socket.MSG_PEEK) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        stream = iter(data)
        while not self._stop.is_set():
            byte = next(stream, None)
            if byte is None:
                if forever is None:
                    return
                stream = iter(forever)
                continue
            sock.sendall(bytes([byte]))
            conn.sent += 1
            if gone():  # waits up to pace: the drip's own rhythm
                return

    def _answer(self, sock: socket.socket, conn: Conn) -> None:
        """One response per connection (each says ``Connection: close``: the server hangs up after it)."""
        path = conn.path
        if path in self.redirects:
            location = self.redirects[path]
            head = f"HTTP/1.1 302 Found\r\nLocation: {location}\r\n" + CLOSE_EMPTY
            sock.sendall(head.encode())
            return
        if path == "/ok.jpg":
            sock.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(JPEG) + JPEG
            )
        elif path == "/drip-status.jpg":
            self._drip(sock, conn, b"HTTP/1.1 200 O", forever=b"K")  # a status line that never ends
        elif path == "/drip-headers.jpg":
            self._drip(sock, conn, b"HTTP/1.1 200 OK\r\n", forever=b"X-Slow: " + b"a" * 10_000 + b"\r\n")
        elif path == "/drip-redirect-body.jpg":
            sock.sendall(b"HTTP/1.1 302 Found\r\nLocation: /ok.jpg\r\nConnection: close\r\n\r\n")
            self._drip(sock, conn, b"", forever=b"<html>moved</html>")
        elif path == "/drip-small-redirect-body.jpg":  # declares a small body, then drips it
            head = "HTTP/1.1 302 Found\r\nLocation: /ok.jpg\r\nContent-Length: 1000\r\n\r\n"
            sock.sendall(head.encode())
            self._drip(sock, conn, b"", forever=b"m")
        elif path == "/endless-redirect-body.jpg":
            sock.sendall(b"HTTP/1.1 302 Found\r\nLocation: /ok.jpg\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"%x\r\n%s\r\n" % (64 * 1024, b"z" * 64 * 1024)
            while not self._stop.is_set():
                sock.sendall(chunk)
                conn.sent += len(chunk)
        elif path == "/drip-body.jpg":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\n\r\n")
            self._drip(sock, conn, JPEG, forever=b"\x00")
        else:
            sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
