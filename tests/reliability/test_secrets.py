"""Credentials never appear in error messages, reject reasons, recorded outcomes, the store or logs.

A secret is planted in a URL's user info, in a URL's query (``?token=``), in S3 storage options and the AWS
environment, and in ``HF_TOKEN``; fetches and catalogs that fail (401 from a loopback HTTP server, a missing
bucket on a loopback moto S3 server, an hf:// repo on a loopback Hub endpoint) are then grepped: every
outcome, reason, exception text, log record (DEBUG and up, every logger) and file written.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.schemas.redact import redact, scrub, secret_values
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.catalog.storage_options import parse_storage_options
from vlmforge.tasks.errors import ReleaseError
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.fetch.outcomes import FetchResult
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.http.failures import FetchError
from vlmforge.tasks.storage import ContentStore

SECRET = "PLANTED-s3cr3t-9f1c2e7a"
HF_SECRET = "hf_PLANTEDtokenABCDEFGHIJKLMNOP123456"
AWS_SECRET = "PLANTEDawsSECRETkey0123456789abcdefABCD"
HTTP = HttpOptions(retries=1, backoff_base=0.01, backoff_max=0.02, read_timeout=2.0, seed=0)
PLANTED = (SECRET, HF_SECRET, AWS_SECRET)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any name resolution other than loopback fails the test: nothing here may leave the machine."""
    real = socket.getaddrinfo

    def guarded(host: Any, *args: Any, **kw: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            raise AssertionError(f"a test tried to reach {host!r}")
        return real(host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", guarded)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # every logger, urllib3's included
    return caplog


def assert_clean(*texts: object, where: str = "") -> None:
    for text in texts:
        for secret in PLANTED:
            assert secret not in str(text), f"secret leaked {where}: {str(text)[:300]}"


def assert_result_clean(res: FetchResult) -> None:
    for o in res.outcomes.values():
        assert_clean(o, o.reason(), o.detail, o.upstream, repr(o), where="in an outcome")
    assert_clean(res.stats.summary(), where="in the stats")


def assert_tree_clean(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            for secret in PLANTED:
                assert secret.encode() not in data, f"secret written to {p}"


def recipe(*sources: dict[str, Any]) -> Any:
    return parse_recipe({"subset": "s", "license": "CC-BY-4.0", "sources": list(sources)})


# ---------------------------------------------------------------------------------------------- http


def test_url_user_info_that_gets_a_401(
    srv: HttpFixture, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    srv.add("/private/a.jpg", b"\xff\xd8\xff\xe0private", Fault("401"))
    srv.add("/public/b.jpg", b"\xff\xd8\xff\xe0public")
    url = f"http://alice:{SECRET}@127.0.0.1:{srv.port}"
    store = ContentStore(str(tmp_path / "store"))
    res = fetch_batch(
        ["a.jpg"],
        recipe({"kind": "http_files", "allow_private": True, "url": url + "/private/{name}"}),
        store,
        client=HttpClient(HTTP),
        options=FetchKnobs(http=HTTP),
    )
    o = res.outcomes["a.jpg"]
    assert o.status == "http_4xx" and "401" in (o.detail or "")
    assert o.upstream is not None and "***@127.0.0.1" in o.upstream  # still says where it went
    ok = fetch_batch(
        ["b.jpg"],
        recipe({"kind": "http_files", "allow_private": True, "url": url + "/public/{name}"}),
        store,
        client=HttpClient(HTTP),
        options=FetchKnobs(http=HTTP),
    )
    assert ok.outcomes["b.jpg"].ok
    assert_result_clean(res)
    assert_result_clean(ok)
    assert_clean(logs.text, where="in the logs")
    assert_tree_clean(tmp_path)  # the store's upstream index holds the redacted URL
    for r in srv.requests():  # nor was it sent in a header it does not belong in
        assert_clean(r.host, r.path, where="in a request line or Host header")


def test_query_tokens_in_file_tar_and_zip_urls(
    srv: HttpFixture, tmp_path: Path, logs: pytest.LogCaptureFixture
) -> None:
    import io
    import zipfile

    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as z:
        z.writestr("z/ok.jpg", b"\xff\xd8\xff\xe0zipped")
    srv.add("/d/a.zip", zbuf.getvalue())
    srv.add("/d/a.tar", b"not a tar at all" * 100)
    srv.add("/d/x.jpg", b"\xff\xd8\xff\xe0x", Fault("500"))
    store = ContentStore(str(tmp_path / "store"))
    res = fetch_batch(
        ["x.jpg", "in/tar.jpg", "z/ok.jpg"],
        recipe(
            {
                "kind": "http_files",
                "allow_private": True,
                "url": srv.url("/d/{name}") + f"?token={SECRET}&sig={SECRET}",
                "match": r"x\.jpg",
            },
            {
                "kind": "archive",
                "allow_private": True,
                "url": srv.url("/d/a.tar") + f"?X-Amz-Signature={SECRET}",
                "format": "tar",
                "match": r"^in/",
            },
            {
                "kind": "archive",
                "allow_private": True,
                "url": srv.url("/d/a.zip") + f"?Signature={SECRET}&Expires=1",
                "format": "zip",
                "match": r"^z/",
            },
        ),
        store,
        client=HttpClient(HTTP),
        options=FetchKnobs(http=HTTP),
    )
    assert res.outcomes["x.jpg"].status == "http_5xx"
    assert res.outcomes["in/tar.jpg"].status == "bad_archive"
    assert res.outcomes["z/ok.jpg"].ok  # its central directory was recorded in the store: redacted
    assert_result_clean(res)
    assert_clean(logs.text, where="in the logs")
    assert_tree_clean(tmp_path)


def test_fetch_error_and_redaction_helpers() -> None:
    err = FetchError(
        "http_4xx", f"GET https://u:{SECRET}@h/x?token={SECRET} failed", url=f"https://{SECRET}@h/"
    )
    assert_clean(err, err.detail, err.url, err.args)
    err.detail += f" then https://bob:{SECRET}@mirror/x"
    err.url = f"https://u:{SECRET}@other/"
    assert_clean(err, err.detail, err.url)
    assert (
        redact(f"see https://u:{SECRET}@h/p?a=1&api_key={SECRET}#f")
        == "see https://***@h/p?a=1&api_key=***#f"
    )
    assert redact(f"token {HF_SECRET} refused") == "token hf_*** refused"
    opts = {
        "key": "AKIAPLANTED",
        "secret": SECRET,
        "anon": False,
        "client_kwargs": {"aws_session_token": SECRET},
    }
    assert set(secret_values(opts)) == {"AKIAPLANTED", SECRET}
    assert scrub(f"bad option secret={SECRET}", secret_values(opts)) == "bad option secret=***"


# ------------------------------------------------------------------------------------------------ s3


def test_s3_failures_with_planted_keys(
    moto_s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    import s3fs

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(key="testing", secret=AWS_SECRET, client_kwargs={"endpoint_url": moto_s3})
    fs.mkdir("media-bucket")
    fs.pipe("media-bucket/ok.jpg", b"\xff\xd8\xff\xe0ok")
    options = {"key": "testing", "secret": AWS_SECRET, "client_kwargs": {"endpoint_url": moto_s3}}
    store = ContentStore(str(tmp_path / "store"))
    res = fetch_batch(
        ["ok.jpg", "missing.jpg", "CLEVR/a.png"],
        recipe(
            {
                "kind": "s3",
                "url": "s3://media-bucket/{name}",
                "anon": False,
                "endpoint_url": moto_s3,
                "match": r"\.jpg$",
            },
            {
                "kind": "archive",
                "allow_private": True,
                "url": "s3://no-such-bucket/CLEVR.zip",
                "member": "{ref}",
                "storage_options": options,
                "match": r"\.png$",
            },
        ),
        store,
        client=HttpClient(HTTP),
        options=FetchKnobs(http=HTTP),
    )
    assert res.outcomes["ok.jpg"].ok
    assert res.outcomes["missing.jpg"].status == "http_404"
    assert not res.outcomes["CLEVR/a.png"].ok
    assert_result_clean(res)
    # the catalog of a release on S3 that is not there, and of one with a bad option
    for release, opts in (
        ("s3://no-such-bucket/release", options),
        ("s3://media-bucket/release", options | {"bogus_option": SECRET}),
    ):
        with pytest.raises(ReleaseError) as info:
            catalog_release(release, storage_options=opts)
        assert_clean(info.value, repr(info.value), where="in a catalog error")
        assert info.value.__cause__ is None  # the raw exception (which may echo options) is not chained
    assert_clean(logs.text, where="in the logs")
    assert_tree_clean(tmp_path)


def test_catalog_errors_redact_urls_and_storage_option_pairs(srv: HttpFixture) -> None:
    with pytest.raises(ReleaseError) as info:
        catalog_release(f"http://bob:{SECRET}@127.0.0.1:{srv.port}/no/release")
    assert_clean(info.value, repr(info.value))
    with pytest.raises(ReleaseError) as info:  # a secret passed without its key is not echoed back
        parse_storage_options(["anon=false", SECRET])
    assert_clean(info.value)
    assert "#2" in str(info.value)


# ------------------------------------------------------------------------------------------------ hf


def test_hf_token_never_shows(
    srv: HttpFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    """An hf:// fetch against a Hub endpoint on loopback that refuses everything, with HF_TOKEN planted."""
    import huggingface_hub.constants as hf_constants
    from huggingface_hub import HfFileSystem

    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(hf_constants, "ENDPOINT", srv.url("").rstrip("/"))
    monkeypatch.setattr(
        hf_constants, "HUGGINGFACE_CO_URL_TEMPLATE", srv.url("") + "{repo_id}/resolve/{revision}/{filename}"
    )
    HfFileSystem.clear_instance_cache()
    try:
        res = fetch_batch(
            ["a.jpg"],
            recipe(
                {"kind": "hf", "repo": "someone/private-set", "revision": "0" * 40, "path": "images/{name}"}
            ),
            ContentStore(str(tmp_path / "store")),
            client=HttpClient(HTTP),
            options=FetchKnobs(http=HTTP),
        )
    finally:
        HfFileSystem.clear_instance_cache()
    o = res.outcomes["a.jpg"]
    assert not o.ok and o.detail
    assert srv.requests(), "the loopback Hub endpoint was used"
    assert any(r.authorization and HF_SECRET in r.authorization for r in srv.requests())  # the token was sent
    assert_result_clean(res)
    assert_clean(logs.text, where="in the logs")
    assert_tree_clean(tmp_path)
