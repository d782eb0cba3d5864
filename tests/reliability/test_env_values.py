"""``${NAME}`` in recipes: only where the schema allows it (the start of a location, a whole storage option
value), only for variables the user allows, and the value is a secret wherever it goes."""

from __future__ import annotations

from pathlib import Path

import pytest
from http_fixture import Fault, HttpFixture
from pydantic import ValidationError

from vlmforge.schemas.recipes import fill, parse_recipe
from vlmforge.schemas.redact import redact
from vlmforge.tasks.fetch.recipe_env import bind_environment

PLANTED = "PLANTEDc0ffee42"


def recipe(**source: object) -> object:
    return parse_recipe({"subset": "s", "license": "MIT", "sources": [source]})


@pytest.mark.parametrize(
    "source",
    [
        {"kind": "http_files", "allow_private": True, "url": "http://127.0.0.1:8765/${PLANTED}/{name}"},
        {"kind": "http_files", "allow_private": True, "url": "https://h.example/{name}?token=${PLANTED}"},
        {"kind": "http_files", "allow_private": True, "url": "${A}${B}/{name}"},
        {"kind": "http_files", "allow_private": True, "url": "${MIRROR}x/{name}"},
        {
            "kind": "archive",
            "allow_private": True,
            "url": "https://h.example/a.zip",
            "member": "${PLANTED}/{ref}",
        },
        {"kind": "s3", "url": "s3://${PLANTED}/{name}"},
        {"kind": "hf", "repo": "o/n", "revision": "r", "path": "${PLANTED}/{ref}"},
        {"kind": "local", "root": "/data/${PLANTED}"},
        {"kind": "local", "root": "/data", "path": "${PLANTED}/{ref}"},
        {"kind": "local", "root": "/data", "storage_options": {"key": "x-${PLANTED}"}},
        {
            "kind": "archive",
            "allow_private": True,
            "url": "s3://b/a.tar",
            "storage_options": {"client_kwargs": {"k": "a${PLANTED}"}},
        },
    ],
)
def test_a_variable_where_the_schema_does_not_allow_one_is_refused(source: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as info:
        recipe(**source)
    assert "environment variable" in str(info.value)


@pytest.mark.parametrize(
    "source",
    [
        {"kind": "http_files", "allow_private": True, "url": "${MIRROR}/{name}"},
        {"kind": "archive", "allow_private": True, "url": "${MAPQA_ZIPS}/MapQA_{name}.zip"},
        {"kind": "local", "root": "${COCO_ROOT}", "path": "train2017/{name}"},
        {"kind": "local", "root": "${COCO_ROOT}/train2017"},
        {
            "kind": "archive",
            "allow_private": True,
            "url": "s3://b/a.tar",
            "storage_options": {"key": "${KEY}", "secret": "${SECRET}"},
        },
    ],
)
def test_allowed_placements_pass(source: dict[str, object]) -> None:
    recipe(**source)


def test_only_allowed_variables_are_expanded_and_the_value_is_a_secret() -> None:
    r = recipe(kind="http_files", url="${VF_MIRROR}/{name}")
    env = {"VF_MIRROR": f"http://127.0.0.1:9/{PLANTED}", "OTHER": "x"}
    unbound = bind_environment(r, (), env)  # type: ignore[arg-type]
    with pytest.raises(Exception, match=r"--env-allow VF_MIRROR"):
        fill(unbound.sources[0].url, {"name": "a.jpg"})  # type: ignore[union-attr]
    bound = bind_environment(r, ("VF_MIRROR",), env)  # type: ignore[arg-type]
    url = fill(bound.sources[0].url, {"name": "a.jpg"})  # type: ignore[union-attr]
    assert url == f"http://127.0.0.1:9/{PLANTED}/a.jpg"
    assert redact(f"GET {url} failed") == "GET ${VF_MIRROR}/a.jpg failed"
    assert PLANTED not in repr(r)  # the parsed recipe never holds the value


def test_storage_options_are_expanded_whole() -> None:
    r = recipe(kind="archive", url="s3://b/a.tar", storage_options={"key": "${VF_KEY}", "anon": False})
    bound = bind_environment(r, ("VF_KEY",), {"VF_KEY": "AKIAPLANTED1234"})  # type: ignore[arg-type]
    assert bound.sources[0].storage_options == {"key": "AKIAPLANTED1234", "anon": False}  # type: ignore[union-attr]
    assert "AKIAPLANTED1234" not in redact("credential AKIAPLANTED1234 refused")


def test_a_value_with_braces_is_text_not_a_template() -> None:
    r = recipe(kind="local", root="${VF_ROOT}", path="{name}")
    bound = bind_environment(r, ("VF_ROOT",), {"VF_ROOT": "/data/{ref}"})  # type: ignore[arg-type]
    assert fill(bound.sources[0].root, {"name": "a", "ref": "x"}) == "/data/{ref}"  # type: ignore[union-attr,arg-type]


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({"Authorization": "Bearer ${VF_TOKEN}"}, True),
        ({"X-Api-Key": "${VF_TOKEN}"}, True),
        ({"X-Api-Key": "k-${VF_TOKEN}"}, False),
        ({"Host": "evil.example"}, False),
        ({"X-A": "a\r\nHost: evil"}, False),
    ],
)
def test_header_rules(headers: dict[str, str], ok: bool) -> None:
    source = {
        "kind": "http_files",
        "allow_private": True,
        "url": "https://h.example/{name}",
        "headers": headers,
    }
    if ok:
        recipe(**source)
    else:
        with pytest.raises(ValidationError):
            recipe(**source)


def test_a_token_header_goes_to_its_own_host_only(
    srv: HttpFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vlmforge.tasks.fetch.acquire import fetch_batch
    from vlmforge.tasks.fetch.options import FetchContext
    from vlmforge.tasks.fetch.outcomes import outcome_columns
    from vlmforge.tasks.http.client import HttpClient, HttpOptions, StaticResolver
    from vlmforge.tasks.storage import ContentStore

    token = "PLANTEDtok3n" + "x" * 12
    monkeypatch.setenv("VF_TOKEN", token)
    with HttpFixture() as other:
        other.add("/b.jpg", b"\xff\xd8\xff\xe0 other")
        srv.add("/a.jpg", b"\xff\xd8\xff\xe0 own")
        srv.add("/b.jpg", b"", Fault("redirect", target=other.url("/b.jpg", host="other.test")))
        r = parse_recipe(
            {
                "subset": "s",
                "license": "MIT",
                "sources": [
                    {
                        "kind": "http_files",
                        "allow_private": True,
                        "url": srv.url("/{name}"),
                        "headers": {"Authorization": "Bearer ${VF_TOKEN}"},
                        "redirects": "any_host",
                    }
                ],
            }
        )
        client = HttpClient(HttpOptions(retries=0, resolver=StaticResolver({"other.test": "127.0.0.1"})))
        store = ContentStore(str(tmp_path / "store"))
        got = fetch_batch(
            ["a.jpg", "b.jpg"], r, store, client=client, context=FetchContext(env_allow=("VF_TOKEN",))
        ).outcomes
        assert got["a.jpg"].ok and got["b.jpg"].ok, got
        assert srv.requests("/a.jpg")[0].authorization == f"Bearer {token}"
        assert other.requests("/b.jpg")[0].authorization is None  # never to the host a redirect leads to
        assert all(token not in str(outcome_columns(o)) for o in got.values())


def test_an_unexpanded_header_or_storage_option_skips_its_source(tmp_path: Path) -> None:
    from vlmforge.tasks.fetch.acquire import fetch_batch
    from vlmforge.tasks.http.client import HttpClient, HttpOptions
    from vlmforge.tasks.storage import ContentStore

    store = ContentStore(str(tmp_path / "store"))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.jpg").write_bytes(b"\xff\xd8\xff\xe0")
    sources = [
        {
            "kind": "http_files",
            "allow_private": True,
            "url": "http://127.0.0.1:9/{name}",
            "headers": {"X-Key": "${VF_UNSET_KEY}"},
        },
        {"kind": "local", "root": str(tmp_path / "m"), "storage_options": {"key": "${VF_UNSET_KEY}"}},
        {
            "kind": "archive",
            "allow_private": True,
            "url": "s3://b/a.tar",
            "storage_options": {"key": "${VF_UNSET_KEY}"},
        },
    ]
    for source in sources:
        r = parse_recipe({"subset": "s", "license": "MIT", "sources": [source]})
        got = fetch_batch(["a.jpg"], r, store, client=HttpClient(HttpOptions(retries=0))).outcomes["a.jpg"]
        assert got.status == "source_error" and "--env-allow VF_UNSET_KEY" in (got.detail or ""), got
