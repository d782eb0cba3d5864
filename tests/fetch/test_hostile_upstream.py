"""A hostile upstream on loopback (``drip_server.py``): a status line, headers or a redirect's body dripped
one byte at a time, an endless redirect body, redirects across ports and host names and to internal
addresses. Every reference ends with a clear reject (or, for a redirect body, is not read at all) within its
request deadline, far below the socket timeout a drip never trips, and the fetch threads are gone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from drip_server import JPEG, DripServer

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.http.client import HttpClient, HttpOptions, StaticResolver
from vlmforge.tasks.http.failures import SOURCE_ERROR, TIMEOUT, FetchError
from vlmforge.tasks.http.redirects import redirect_refusal
from vlmforge.tasks.storage import ContentStore

REQUEST_TIMEOUT = 2.0
READ_TIMEOUT = 60.0  # a drip never trips it: before the request deadline, each case took >= this
BOUND = 30.0  # generous for a loaded machine, and still half the socket timeout
RESOLVER = StaticResolver({"upstream.test": "127.0.0.1", "other.test": "127.0.0.1"})


def client() -> HttpClient:
    return HttpClient(
        HttpOptions(
            request_timeout=REQUEST_TIMEOUT, read_timeout=READ_TIMEOUT, retries=0, resolver=RESOLVER, seed=1
        )
    )


@pytest.fixture
def srv() -> Iterator[DripServer]:
    with DripServer(pace=0.5) as server:
        yield server


def fetch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("fetch")]


def fetch_one(srv: DripServer, name: str, tmp_path: Path, **source: object) -> tuple[object, float]:
    recipe = parse_recipe(
        {
            "subset": "s",
            "license": "MIT",
            "sources": [{"kind": "http_files", "allow_private": True, "url": srv.url("/{name}")} | source],
        }
    )
    t0 = time.monotonic()
    result = fetch_batch(
        [name],
        recipe,
        ContentStore(str(tmp_path / "store")),
        client=client(),
        options=FetchKnobs(concurrency=2, batch_timeout=600.0),
    )
    return result.outcomes[name], time.monotonic() - t0


@pytest.mark.parametrize("name", ["drip-status.jpg", "drip-headers.jpg", "drip-body.jpg"])
def test_a_dripping_answer_ends_at_the_request_deadline(srv: DripServer, name: str, tmp_path: Path) -> None:
    outcome, seconds = fetch_one(srv, name, tmp_path)
    assert outcome.status == TIMEOUT, outcome  # type: ignore[attr-defined]
    assert "request deadline" in (outcome.detail or ""), outcome  # type: ignore[attr-defined]
    assert seconds < BOUND, f"{name}: {seconds:.1f} s"
    (conn,) = srv.conns_for(f"/{name}")
    assert conn.closed.wait(BOUND), "the client still holds the connection"
    assert conn.sent > 0  # the server did drip (the case is not vacuous)
    assert fetch_threads() == []
    print(f"{name}: timeout after {seconds:.2f} s (request deadline {REQUEST_TIMEOUT} s), {conn.sent} bytes")


@pytest.mark.parametrize(
    "name", ["drip-redirect-body.jpg", "drip-small-redirect-body.jpg", "endless-redirect-body.jpg"]
)
def test_a_redirect_body_is_not_read(srv: DripServer, name: str, tmp_path: Path) -> None:
    outcome, seconds = fetch_one(srv, name, tmp_path)
    # a body under the request deadline's reach: not drained however small it says it is
    assert seconds < REQUEST_TIMEOUT, f"{name}: {seconds:.2f} s"
    assert outcome.status == "ok" and outcome.nbytes == len(JPEG), outcome  # type: ignore[attr-defined]
    (conn,) = srv.conns_for(f"/{name}")
    assert conn.closed.wait(BOUND)
    assert seconds < BOUND
    assert conn.sent < 8 * 1024 * 1024  # the endless body was dropped, not drained
    assert fetch_threads() == []


def test_a_status_line_dripped_forever_without_a_batch_deadline_still_ends(srv: DripServer) -> None:
    with pytest.raises(FetchError) as info:
        client().get(srv.url("/drip-status.jpg"))
    assert info.value.failure == TIMEOUT and "status line" in str(info.value)


def refused(srv: DripServer, url: str, policy: str = "same_host") -> str:
    with pytest.raises(FetchError) as info:
        client().get(url, redirects=policy)
    assert info.value.failure == SOURCE_ERROR, info.value
    return str(info.value)


def test_redirect_policy(srv: DripServer) -> None:
    other = DripServer()
    with other:
        srv.redirects = {
            "/to-port.jpg": other.url("/ok.jpg"),
            "/to-host.jpg": srv.url("/ok.jpg", host="other.test"),
            "/to-metadata.jpg": "http://169.254.169.254/latest/meta-data/",
            "/to-loopback.jpg": srv.url("/ok.jpg"),
            "/to-file.jpg": "file:///etc/hostname",
            "/same.jpg": "/ok.jpg",
        }
        assert "another host or port" in refused(srv, srv.url("/to-port.jpg"))
        assert "another host or port" in refused(srv, srv.url("/to-host.jpg"))
        assert "not an http(s) URL" in refused(srv, srv.url("/to-file.jpg"), "any_host")
        assert client().get(srv.url("/same.jpg")).body == JPEG
        # any_public_host from a host NAME (upstream.test): no internal address, however it is spelt
        named = "upstream.test"
        assert "internal address" in refused(srv, srv.url("/to-metadata.jpg", named), "any_public_host")
        assert "internal address" in refused(srv, srv.url("/to-loopback.jpg", named), "any_public_host")
        assert "internal address" in refused(srv, srv.url("/to-host.jpg", named), "any_public_host")
        # ... unless the recipe's own URL names an internal address (a mirror on the local network)
        assert client().get(srv.url("/to-port.jpg"), redirects="any_public_host").body == JPEG
        assert client().get(srv.url("/to-host.jpg", named), redirects="any_host").body == JPEG
        assert other.conns_for("/ok.jpg") and not srv.conns_for("/latest/meta-data/")


def test_never_from_https_to_http() -> None:
    a, b = urlsplit("https://h.example/x"), urlsplit("http://h.example/x")
    for policy in ("same_host", "any_public_host", "any_host"):
        assert redirect_refusal(a, a, b, policy) == "redirect from https to http"
    assert redirect_refusal(b, b, a, "same_host") is None  # an upgrade on the same host is fine


def test_the_deadlines_are_run_options() -> None:
    from vlmforge.schemas.config import RunConfig

    cfg = RunConfig.of(release="r", out="o", fetch_batch_timeout=60.0, fetch_request_timeout=5.0)
    assert (cfg.fetch.fetch_batch_timeout, cfg.fetch.fetch_request_timeout) == (60.0, 5.0)
    assert RunConfig.of(release="r", out="o").fetch.fetch_request_timeout == 300.0
