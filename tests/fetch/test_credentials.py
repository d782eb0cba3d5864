"""Credentials follow the recipe URL's scheme, host and port exactly; an upgrade to https goes to 443 only; a
secret echoed back by an upstream, percent-encoded or in another case, is masked wherever it is written."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.schemas.redact import redact, register_secret
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext
from vlmforge.tasks.fetch.outcomes import outcome_columns
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.http.failures import SOURCE_ERROR, FetchError
from vlmforge.tasks.http.redirects import redirect_refusal, same_origin
from vlmforge.tasks.storage import ContentStore

JPEG = b"\xff\xd8\xff\xe0 a jpeg"


def parts(url: str):  # noqa: ANN201 - SplitResult
    return urlsplit(url)


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("http://h.example/x", "http://h.example:80/y", True),
        ("http://H.example/x", "http://h.example/y", True),
        ("http://h.example/x", "http://h.example:8080/x", False),
        ("http://h.example/x", "https://h.example/x", False),
        ("https://h.example/x", "https://h.example:443/x", True),
        ("http://127.0.0.1:8000/x", "http://127.0.0.1:8001/x", False),
    ],
)
def test_same_origin_is_scheme_host_and_port(a: str, b: str, same: bool) -> None:
    assert same_origin(parts(a), parts(b)) is same


def test_an_upgrade_to_https_is_followed_to_443_only() -> None:
    http = parts("http://h.example/x")
    assert redirect_refusal(http, http, parts("https://h.example/x"), "same_host") is None
    refusal = redirect_refusal(http, http, parts("https://h.example:8443/x"), "same_host")
    assert refusal is not None and "another host or port (h.example:8443)" in refusal
    on_port = parts("http://h.example:8080/x")
    assert redirect_refusal(on_port, on_port, parts("https://h.example:8080/x"), "same_host") is None
    assert redirect_refusal(on_port, on_port, parts("https://h.example/x"), "same_host") is not None


def test_a_token_is_not_sent_to_another_port_of_the_same_host() -> None:
    token = "Bearer PLANTEDport" + "p" * 16
    with HttpFixture() as own, HttpFixture() as other:
        other.add("/b.jpg", JPEG)
        own.add("/a.jpg", JPEG)
        own.add("/b.jpg", b"", Fault("redirect", target=other.url("/b.jpg")))  # 127.0.0.1, another port
        client = HttpClient(HttpOptions(retries=0))
        headers = {"Authorization": token}
        assert client.get(own.url("/a.jpg"), headers=headers, redirects="any_host").body == JPEG
        assert client.get(own.url("/b.jpg"), headers=headers, redirects="any_host").body == JPEG
        assert own.requests("/a.jpg")[0].authorization == token
        assert own.requests("/b.jpg")[0].authorization == token
        assert other.requests("/b.jpg")[0].authorization is None


def test_an_upgrade_to_another_port_is_refused_under_same_host() -> None:
    with HttpFixture() as own, HttpFixture() as other:
        other.add("/b.jpg", JPEG)
        target = other.url("/b.jpg").replace("http://", "https://")
        own.add("/b.jpg", b"", Fault("redirect", target=target))
        with pytest.raises(FetchError) as err:
            HttpClient(HttpOptions(retries=0)).get(own.url("/b.jpg"))
        assert err.value.failure == SOURCE_ERROR and "another host or port" in err.value.detail
        assert other.requests() == []  # nothing sent there


def test_masking_covers_encoded_and_case_changed_spellings() -> None:
    secret = "PLANTEDmask/Val ue+1"
    register_secret(secret, "${VF_MASKED}")
    spellings = [
        secret,
        secret.upper(),
        secret.lower(),
        quote(secret, safe=""),
        quote(secret, safe="").lower(),
        quote(quote(secret, safe=""), safe=""),
        secret.replace(" ", "+"),
    ]
    for spelt in spellings:
        assert redact(f"Location: http://h/x?q={spelt}&z=1") == "Location: http://h/x?q=${VF_MASKED}&z=1"


def test_a_secret_echoed_in_a_redirect_is_not_persisted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "PLANTEDecho/t0ken Value"
    monkeypatch.setenv("VF_ECHO", token)
    with HttpFixture() as srv, HttpFixture() as other:
        # the upstream echoes the token, percent-encoded and upper-cased, in a redirect to another port
        echoed = f"{other.url('/x.jpg')}?a={quote(token, safe='')}&b={token.upper().replace(' ', '+')}"
        srv.add("/x.jpg", b"", Fault("redirect", target=echoed))
        recipe = parse_recipe(
            {
                "subset": "s",
                "license": "MIT",
                "sources": [
                    {
                        "kind": "http_files",
                        "url": srv.url("/{name}"),
                        "headers": {"Authorization": "Bearer ${VF_ECHO}"},
                        "allow_private": True,
                    }
                ],
            }
        )
        got = fetch_batch(
            ["x.jpg"],
            recipe,
            ContentStore(str(tmp_path / "store")),
            client=HttpClient(HttpOptions(retries=0)),
            context=FetchContext(env_allow=("VF_ECHO",)),
        ).outcomes["x.jpg"]
        assert got.status == SOURCE_ERROR, got
        columns = str(outcome_columns(got))
        assert "${VF_ECHO}" in columns
        for spelt in (token, token.upper(), quote(token, safe=""), "PLANTEDECHO", "planted"):
            assert spelt not in columns, columns
        assert other.requests() == []
