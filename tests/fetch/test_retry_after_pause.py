"""A host that answers one reference with 429 + ``Retry-After`` pauses the whole host; the batch's other
references to that host that would wait past the batch deadline are not sent and end with the host's own
answer (``http_429``, "not sent: ... asked every request to wait"), not as ``timeout``s of their own, and
they do not count towards the host's circuit breaker (``tasks/http/hosts.py``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.http.failures import FetchError
from vlmforge.tasks.http.hosts import HostTable
from vlmforge.tasks.storage import ContentStore


def test_waiting_references_carry_the_hosts_answer_not_a_timeout(srv: HttpFixture, tmp_path: Path) -> None:
    srv.add("/h/first.jpg", b"never served", Fault("429", retry_after="120"))
    names = ["first.jpg", *(f"{i}.jpg" for i in range(4))]
    for n in names[1:]:
        srv.add(f"/h/{n}", b"\xff\xd8\xff" + n.encode())
    http = HttpOptions(retries=2, backoff_base=0.01, seed=1)
    recipe = parse_recipe(
        {
            "subset": "s",
            "license": "MIT",
            "sources": [{"kind": "http_files", "url": srv.url("/h/{name}"), "allow_private": True}],
        }
    )
    t0 = time.monotonic()
    res = fetch_batch(
        names,
        recipe,
        ContentStore(str(tmp_path / "store")),
        client=HttpClient(http),
        options=FetchKnobs(concurrency=1, http=http, batch_timeout=5.0),  # one thread: first.jpg goes first
    )
    assert time.monotonic() - t0 < 60  # a hang guard: nothing waits out the 120 s pause
    assert res.outcomes["first.jpg"].status == "http_429"
    for n in names[1:]:
        o = res.outcomes[n]
        assert o.status == "http_429" and "not sent" in (o.detail or ""), o
        assert "asked every request to wait" in (o.detail or ""), o
        assert srv.requests(f"/h/{n}") == []  # the host was left alone, as it asked
    assert res.stats.failures == {"http_429": len(names)}


def test_the_pause_keeps_the_class_of_the_answer_that_set_it() -> None:
    table = HostTable(per_host=4, breaker_failures=2, breaker_cooldown=60)
    with table.slot("h") as state:
        table.record(state, FetchError("http_5xx", "503", retry_after=300), "h")
    for _ in range(3):  # waiting references never open the breaker
        with pytest.raises(FetchError) as info, table.slot("h", deadline=time.monotonic() + 1):
            pass
        assert info.value.failure == "http_5xx" and info.value.retry_after is not None
        assert "not sent: h asked every request to wait" in info.value.detail
    assert state.failures == 1 and state.open_until == 0.0
