"""X-Robots-Tag opt-outs (issue 43 item 10): an upstream answering ``noai``, ``noimageai``, ``noindex`` or
``noimageindex`` (img2dataset's default list), for every crawler or for our User-Agent's token, makes the
reference ``opted_out`` (its body never read or stored) and its row a reject; ``--user-agent`` names us,
``--ignore-robots-tag`` is for one's own servers. A real loopback HTTP server sends the headers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import run_flow
from http_fixture import Fault, HttpFixture
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.http.failures import OPTED_OUT, FetchError
from vlmforge.tasks.http.opt_out import DEFAULT_USER_AGENT, DISALLOWED_DIRECTIVES, opted_out, robots_token
from vlmforge.tasks.manifests import OutputLayout, read_table

SUBSET = "remote"


def _jpeg(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (shade, 80, 120)).save(buf, "JPEG")
    return buf.getvalue()


def _robots(value: str) -> Fault:
    return Fault("headers", headers=(("X-Robots-Tag", value),))


@pytest.mark.parametrize(
    ("values", "found"),
    [
        (["noai"], "noai"),
        (["noindex, nofollow"], "noindex"),
        (["NoImageAI"], "noimageai"),
        (["vlmforge: noai"], "vlmforge: noai"),
        (["otherbot: noai"], None),  # another crawler's
        (["unavailable_after: 25 Jun 2010 15:00:00 PST"], None),
        (["nofollow", "otherbot: noindex", "vlmforge: noimageindex"], "vlmforge: noimageindex"),
        ([], None),
    ],
)
def test_which_directives_opt_out(values: list[str], found: str | None) -> None:
    assert opted_out(values, "vlmforge", DISALLOWED_DIRECTIVES) == found


def test_an_opted_out_answer_is_not_read_and_names_the_directive(srv: HttpFixture) -> None:
    assert robots_token(DEFAULT_USER_AGENT) == "vlmforge" and DEFAULT_USER_AGENT.startswith("vlmforge/")
    srv.add("/no.jpg", _jpeg(1) * 50, _robots("noai"))
    srv.add("/ours.jpg", _jpeg(2), _robots("vlmforge: noimageai"))
    srv.add("/theirs.jpg", _jpeg(3), _robots("otherbot: noai"))
    client = HttpClient(HttpOptions(retries=0))
    for path, directive in (("/no.jpg", "noai"), ("/ours.jpg", "vlmforge: noimageai")):
        with pytest.raises(FetchError) as err:
            client.get(srv.url(path), expect_media=True)
        assert err.value.failure == OPTED_OUT and directive in err.value.detail
    assert client.get(srv.url("/theirs.jpg"), expect_media=True).body == _jpeg(3)
    (no,) = srv.requests("/no.jpg")
    assert no.user_agent == DEFAULT_USER_AGENT
    # a User-Agent of the user's own names another crawler; no directives: nothing opts out
    mine = HttpClient(HttpOptions(retries=0, user_agent="mycrawler/2 (+ops@example.org)"))
    assert mine.get(srv.url("/ours.jpg"), expect_media=True).body == _jpeg(2)
    assert srv.requests("/ours.jpg")[-1].user_agent == "mycrawler/2 (+ops@example.org)"
    plain = HttpClient(HttpOptions(retries=0, disallowed_directives=()))
    assert plain.get(srv.url("/no.jpg"), expect_media=True).body == _jpeg(1) * 50


@pytest.mark.slow
def test_an_opted_out_image_rejects_its_row_and_the_switch_redoes_the_batch(
    prefect_harness: None, tmp_path: Path
) -> None:
    folder = tmp_path / "release" / SUBSET
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("License: CC0-1.0\n")
    rows = [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": name}, "What is it?"]},
                {"role": "assistant", "content": "a photo"},
            ],
        }
        for i, name in enumerate(["ok.jpg", "noai.jpg"])
    ]
    (folder / f"{SUBSET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with HttpFixture() as srv:
        srv.add("/m/ok.jpg", _jpeg(1))
        srv.add("/m/noai.jpg", _jpeg(2), _robots("noai, noimageai"))
        recipes = tmp_path / "recipes"
        recipes.mkdir()
        (recipes / f"{SUBSET}.yaml").write_text(
            f"subset: {SUBSET}\nlicense: CC0-1.0\n"
            f"sources:\n  - kind: http_files\n    allow_private: true\n    url: {srv.url('/m/{name}')}\n"
        )
        cfg = RunConfig(
            release=str(tmp_path / "release"),
            out=str(tmp_path / "out"),
            catalogs=(str(recipes),),
            user_agent="trialbot/1.0 (+tests)",
            max_reject_rate=0.9,
        )
        first = run_flow(cfg).subsets[0]
        assert (first.stats.ok, first.stats.rejected) == (1, 1) and first.published, first
        assert {r.user_agent for r in srv.requests()} == {"trialbot/1.0 (+tests)"}
        layout = OutputLayout(cfg.out)
        samples = {r["sample_id"]: r for r in read_table(layout, "samples", SUBSET).to_pylist()}
        assert samples["r1"]["status"] == "rejected"
        assert samples["r1"]["reason"] == "fetch_failed: noai.jpg: opted_out", samples["r1"]
        media = {m["ref"]: m for m in read_table(layout, "media", SUBSET).to_pylist()}
        assert media["noai.jpg"]["fetch_status"] == "opted_out"
        assert "X-Robots-Tag noai" in media["noai.jpg"]["fetch_detail"]

        again = run_flow(cfg.replace(ignore_robots_tag=True)).subsets[0]  # the user's own server
        assert again.stats.skipped_batches == 0 and (again.stats.ok, again.stats.rejected) == (2, 0), again
