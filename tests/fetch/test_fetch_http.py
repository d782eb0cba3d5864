"""The HTTP client against a real loopback server with fault modes: classes, retries, politeness."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate

import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.tasks.http.client import HttpClient, HttpOptions, StaticResolver
from vlmforge.tasks.http.failures import (
    CIRCUIT_OPEN,
    DNS_ERROR,
    HTML_PAGE,
    HTTP_4XX,
    HTTP_5XX,
    HTTP_404,
    HTTP_429,
    TIMEOUT,
    TOO_LARGE,
    TRUNCATED,
    FetchError,
    looks_like_html,
)
from vlmforge.tasks.http.resumable import stream
from vlmforge.tasks.http.retry import parse_retry_after

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 40  # starts like a JPEG; content does not matter here


def fast(**kw: object) -> HttpOptions:
    base: dict[str, object] = {"backoff_base": 0.01, "backoff_max": 0.05, "retries": 2, "seed": 1}
    return HttpOptions(**(base | kw))  # type: ignore[arg-type]


def failure(client: HttpClient, url: str, **kw: object) -> FetchError:
    with pytest.raises(FetchError) as info:
        client.get(url, **kw)  # type: ignore[arg-type]
    return info.value


def test_ok_body_and_keepalive_pool_reuses_connections(srv: HttpFixture) -> None:
    for i in range(20):
        srv.add(f"/{i}.jpg", JPEG + bytes([i]))
    client = HttpClient(fast(per_host=2))
    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(lambda i: client.get(srv.url(f"/{i}.jpg")).body, range(20)))
    assert bodies == [JPEG + bytes([i]) for i in range(20)]
    assert srv.connections <= 2  # pooled keep-alive: never more connections than the per-host limit
    assert srv.max_in_flight <= 2


def test_per_host_concurrency_limit_holds_under_load(srv: HttpFixture) -> None:
    for i in range(8):
        srv.add(f"/s{i}.jpg", JPEG, Fault("delay", delay=0.15))
    client = HttpClient(fast(per_host=3))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.get(srv.url(f"/s{i}.jpg")), range(8)))
    assert srv.max_in_flight == 3


def test_404_is_permanent_and_not_retried(srv: HttpFixture) -> None:
    srv.add("/gone.jpg", JPEG, Fault("404"))
    err = failure(HttpClient(fast()), srv.url("/gone.jpg"))
    assert err.failure == HTTP_404 and not err.transient
    assert len(srv.requests("/gone.jpg")) == 1


def test_429_retry_after_is_honoured(srv: HttpFixture) -> None:
    srv.add("/busy.jpg", JPEG, Fault("429", times=1, retry_after="1"))
    resp = HttpClient(fast()).get(srv.url("/busy.jpg"))
    assert resp.body == JPEG and resp.attempts == 2
    first, second = srv.requests("/busy.jpg")
    assert first.status == 429 and second.status == 200
    assert second.t_start - first.t_start >= 1.0  # waited as told, not the 10 ms backoff


def test_503_retry_after_pauses_the_whole_host(srv: HttpFixture) -> None:
    srv.add("/a.jpg", JPEG, Fault("503", times=1, retry_after="1"))
    srv.add("/b.jpg", JPEG)
    client = HttpClient(fast(per_host=2))
    t = threading.Thread(target=client.get, args=(srv.url("/a.jpg"),))
    t.start()
    time.sleep(0.3)  # a.jpg got its 503 by now; the host is paused for ~1 s
    client.get(srv.url("/b.jpg"))
    t.join()
    a503 = srv.requests("/a.jpg")[0]
    assert srv.requests("/b.jpg")[0].t_start - a503.t_start >= 0.9


def test_retry_after_beyond_the_cap_fails_for_this_run(srv: HttpFixture) -> None:
    srv.add("/later.jpg", JPEG, Fault("429", retry_after="3600"))
    err = failure(HttpClient(fast(retry_after_max=5)), srv.url("/later.jpg"))
    assert err.failure == HTTP_429 and "exceeds the cap" in err.detail
    assert len(srv.requests("/later.jpg")) == 1


def test_a_stream_also_leaves_a_retry_after_beyond_the_cap_for_a_later_run(srv: HttpFixture) -> None:
    srv.add("/later.tar", JPEG, Fault("503", retry_after="3600"))
    t0 = time.monotonic()
    client = HttpClient(fast(retry_after_max=5))
    with pytest.raises(FetchError) as info, stream(client, srv.url("/later.tar")) as body:
        body.read()
    assert info.value.failure == "http_5xx" and "exceeds the cap" in info.value.detail
    assert time.monotonic() - t0 < 5


def test_retry_after_http_date() -> None:
    now = time.time()
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30, abs=1)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_500_then_success_is_retried(srv: HttpFixture) -> None:
    srv.add("/flaky.jpg", JPEG, Fault("500", times=2))
    resp = HttpClient(fast(retries=3)).get(srv.url("/flaky.jpg"))
    assert resp.body == JPEG and resp.attempts == 3


def test_persistent_500_gives_up_after_the_retries(srv: HttpFixture) -> None:
    srv.add("/down.jpg", JPEG, Fault("500"))
    err = failure(HttpClient(fast(retries=2)), srv.url("/down.jpg"))
    assert err.failure == HTTP_5XX and err.attempts == 3
    assert len(srv.requests("/down.jpg")) == 3


def test_other_4xx_is_permanent(srv: HttpFixture) -> None:
    srv.add("/r.jpg", JPEG, Fault("redirect", target="/nowhere"))
    err = failure(HttpClient(fast()), srv.url("/r.jpg"))  # redirect followed to a 404
    assert err.failure == HTTP_404
    srv.add("/ok.jpg", JPEG)
    srv.add("/r2.jpg", JPEG, Fault("redirect", target="/ok.jpg"))
    assert HttpClient(fast()).get(srv.url("/r2.jpg")).body == JPEG


def test_slow_body_hits_the_request_timeout(srv: HttpFixture) -> None:
    srv.add("/slow.jpg", JPEG, Fault("slow", delay=0.2, pieces=10))
    err = failure(HttpClient(fast(request_timeout=0.5, retries=0)), srv.url("/slow.jpg"))
    assert err.failure == TIMEOUT and err.transient


def test_stalled_body_hits_the_read_timeout(srv: HttpFixture) -> None:
    srv.add("/stall.jpg", JPEG, Fault("stall", delay=1.5))
    err = failure(HttpClient(fast(read_timeout=0.3, retries=0)), srv.url("/stall.jpg"))
    assert err.failure == TIMEOUT


def test_truncated_chunked_body(srv: HttpFixture) -> None:
    srv.add("/cut.jpg", JPEG * 10, Fault("truncated", times=1))
    resp = HttpClient(fast()).get(srv.url("/cut.jpg"))  # transient: the retry gets the whole body
    assert resp.body == JPEG * 10 and resp.attempts == 2
    srv.fault("/cut.jpg", Fault("truncated"))
    err = failure(HttpClient(fast(retries=1)), srv.url("/cut.jpg"))
    assert err.failure == TRUNCATED


def test_wrong_content_length_is_truncated(srv: HttpFixture) -> None:
    srv.add("/short.jpg", JPEG, Fault("bad_length"))
    err = failure(HttpClient(fast(retries=0)), srv.url("/short.jpg"))
    assert err.failure == TRUNCATED and "1000 more expected" in err.detail


def test_html_error_page_served_as_jpeg(srv: HttpFixture) -> None:
    srv.add("/page.jpg", JPEG, Fault("html"))
    err = failure(HttpClient(fast()), srv.url("/page.jpg"), expect_media=True)
    assert err.failure == HTML_PAGE and "image/jpeg" in err.detail
    assert len(srv.requests("/page.jpg")) == 1  # not retried
    assert looks_like_html(b"\n  <!DOCTYPE HTML><html>") and not looks_like_html(JPEG)


def test_size_cap_with_and_without_content_length(srv: HttpFixture) -> None:
    big = JPEG * 100  # ~1 MB
    srv.add("/big.jpg", big)
    srv.add("/bigchunked.jpg", big, Fault("chunked"))
    client = HttpClient(fast(max_bytes=100_000))
    err = failure(client, srv.url("/big.jpg"))
    assert err.failure == TOO_LARGE and "Content-Length" in err.detail
    assert client.bytes_received == 0  # refused on the header: the body was never read
    err = failure(client, srv.url("/bigchunked.jpg"))
    assert err.failure == TOO_LARGE and "body exceeds" in err.detail


def test_circuit_breaker_stops_hammering_a_failing_host(srv: HttpFixture) -> None:
    for i in range(10):
        srv.add(f"/x{i}.jpg", JPEG, Fault("500"))
    client = HttpClient(fast(retries=1, breaker_failures=4, breaker_cooldown=60, per_host=1))
    errors = []
    for i in range(10):
        with pytest.raises(FetchError) as info:
            client.get(srv.url(f"/x{i}.jpg"))
        errors.append(info.value.failure)
    assert errors[:2] == [HTTP_5XX, HTTP_5XX]
    assert errors[-1] == CIRCUIT_OPEN and not FetchError(CIRCUIT_OPEN, "").transient
    assert len(srv.requests()) == 4  # breaker opened after 4 consecutive failures: no more requests


def test_circuit_half_opens_after_cooldown(srv: HttpFixture) -> None:
    srv.add("/h.jpg", JPEG, Fault("500", times=2))
    client = HttpClient(fast(retries=0, breaker_failures=2, breaker_cooldown=0.3))
    for _ in range(2):
        assert failure(client, srv.url("/h.jpg")).failure == HTTP_5XX
    assert failure(client, srv.url("/h.jpg")).failure == CIRCUIT_OPEN
    time.sleep(0.35)
    assert client.get(srv.url("/h.jpg")).body == JPEG  # the probe succeeds and closes the circuit


def test_dns_error_is_classified(srv: HttpFixture) -> None:
    srv.add("/a.jpg", JPEG)
    resolver = StaticResolver({"images.example.org": "127.0.0.1"}, only=True)
    client = HttpClient(fast(resolver=resolver, retries=1))
    assert client.get(f"http://images.example.org:{srv.port}/a.jpg").body == JPEG  # Host header kept
    err = failure(client, f"http://nxdomain.example.org:{srv.port}/a.jpg")
    assert err.failure == DNS_ERROR and err.transient and err.attempts == 2


def test_connect_error_on_a_closed_port() -> None:
    with HttpFixture() as s:
        port = s.port
    err = failure(HttpClient(fast(retries=0)), f"http://127.0.0.1:{port}/a.jpg")
    assert err.failure == "connect_error"


def test_range_requests(srv: HttpFixture) -> None:
    data = bytes(range(256)) * 10
    srv.add("/blob.bin", data)
    client = HttpClient(fast())
    r = client.get(srv.url("/blob.bin"), byte_range=(10, 19))
    assert r.body == data[10:20] and r.total_size == len(data)
    r = client.get(srv.url("/blob.bin"), suffix=5)
    assert r.body == data[-5:]
    srv.add("/norange.bin", data, Fault("no_range"))
    err = failure(client, srv.url("/norange.bin"), byte_range=(0, 9))
    assert "ignores Range" in err.detail


def test_stream_resumes_after_a_cut(srv: HttpFixture) -> None:
    data = bytes(range(256)) * 4000
    srv.add("/s.tar", data, Fault("cut", times=1))
    client = HttpClient(fast())
    with stream(client, srv.url("/s.tar")) as f:
        got = b"".join(iter(lambda: f.read(65536), b""))
    assert got == data
    first, second = srv.requests("/s.tar")
    assert second.range == f"bytes={first.sent}-"  # resumed where the cut happened, not from zero


def test_user_agent_names_the_tool(srv: HttpFixture) -> None:
    srv.add("/ua.bin", b"x" * 64)
    HttpClient(HttpOptions(retries=0)).get(srv.url("/ua.bin"))
    (seen,) = srv.requests("/ua.bin")
    assert seen.user_agent is not None and seen.user_agent.startswith("vlmforge/"), seen.user_agent


def test_http_4xx_class_for_forbidden(srv: HttpFixture) -> None:
    # A 403 from a real handler: the fixture answers 416 for an unsatisfiable range, another 4xx.
    srv.add("/tiny.bin", b"abc")
    err = failure(HttpClient(fast()), srv.url("/tiny.bin"), byte_range=(100, 200))
    assert err.failure == HTTP_4XX and "416" in err.detail
