"""fetch_batch: recipe sources in order, the content-addressed store, failures as data, retries of exactly
the failed references (found with DuckDB), S3 through a real moto server, hf:// URLs."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.schemas.recipes import Recipe, parse_recipe
from vlmforge.schemas.tables import MEDIA_FETCH_FIELDS
from vlmforge.tasks.catalog.recipe_files import RecipeError
from vlmforge.tasks.fetch.acquire import FetchStream, fetch_batch, read_outcome
from vlmforge.tasks.fetch.options import FetchContext, FetchKnobs
from vlmforge.tasks.fetch.outcomes import FAILED_REFS_SQL, FetchStats, outcome_columns
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.storage import ContentStore

HTTP = HttpOptions(backoff_base=0.01, backoff_max=0.02, retries=1, seed=0)
OPTS = FetchKnobs(concurrency=4, http=HTTP)


def img(i: int) -> bytes:
    return b"\xff\xd8\xff\xe0" + hashlib.sha256(str(i).encode()).digest() * 50


def make_recipe(*sources: dict[str, Any], subset: str = "s", **kw: Any) -> Recipe:
    return parse_recipe({"subset": subset, "license": "CC-BY-4.0", "sources": list(sources), **kw})


def fetch(refs: list[str], recipe: Recipe, store: ContentStore, **kw: Any) -> dict[str, Any]:
    kw.setdefault("client", HttpClient(HTTP))
    return fetch_batch(refs, recipe, store, options=OPTS, **kw).outcomes


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(str(tmp_path / "store"))


@pytest.fixture
def release(tmp_path: Path) -> FetchContext:
    """A subset folder with a loose file, a media/ file and a media tar, as in a release."""
    sub = tmp_path / "release" / "coco_sub"
    (sub / "media").mkdir(parents=True)
    (sub / "loose.jpg").write_bytes(img(100))
    (sub / "media" / "inmedia.jpg").write_bytes(img(101))
    tar = sub / "media" / "shard_000000.tar"
    with tarfile.open(tar, "w") as t:
        info = tarfile.TarInfo("intar/x.jpg")
        data = img(102)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return FetchContext(subset_path=str(sub), media_tars=(str(tar),))


def test_sources_are_tried_in_order(srv: HttpFixture, store: ContentStore, release: FetchContext) -> None:
    for i in range(3):
        srv.add(f"/img/remote{i}.jpg", img(i))
    srv.add("/img/loose.jpg", b"upstream copy that must not be fetched")
    recipe = make_recipe(
        {"kind": "release_tar"}, {"kind": "http_files", "allow_private": True, "url": srv.url("/img/{name}")}
    )
    refs = ["loose.jpg", "inmedia.jpg", "intar/x.jpg", "remote0.jpg", "a/remote1.jpg", "remote2.jpg"]
    out = fetch(refs, recipe, store, context=release)
    assert [out[r].source for r in refs] == ["release_tar"] * 3 + ["http_files"] * 3
    assert [read_outcome(out[r], store) for r in refs] == [
        img(100),
        img(101),
        img(102),
        img(0),
        img(1),
        img(2),
    ]
    assert out["intar/x.jpg"].upstream.endswith("shard_000000.tar#intar/x.jpg")
    assert srv.requests("/img/loose.jpg") == []  # answered locally first
    assert out["remote0.jpg"].sha256 == hashlib.sha256(img(0)).hexdigest()
    assert store.get(out["remote0.jpg"].sha256) == img(0)


def test_default_recipe_keeps_the_pipeline_resolution_order(
    tmp_path: Path, store: ContentStore, release: FetchContext
) -> None:
    root = tmp_path / "media_root"
    root.mkdir()
    (root / "loose.jpg").write_bytes(b"from the media root")
    ctx = FetchContext(release.subset_path, release.media_tars, media_roots=(str(root),))
    out = fetch(["loose.jpg", "intar/x.jpg", "nowhere.jpg"], Recipe.default("s"), store, context=ctx)
    assert (
        out["loose.jpg"].source == "local" and read_outcome(out["loose.jpg"], store) == b"from the media root"
    )
    assert out["intar/x.jpg"].source == "release_tar"
    assert out["nowhere.jpg"].status == "not_found"
    assert Recipe.default("s").remote is False


def test_local_source_with_an_environment_root(
    tmp_path: Path, store: ContentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "coco" / "train2017").mkdir(parents=True)
    (tmp_path / "coco" / "train2017" / "000000000009.jpg").write_bytes(img(9))
    recipe = make_recipe({"kind": "local", "root": "${COCO_ROOT}", "path": "train2017/{name}"})
    out = fetch(["000000000009.jpg"], recipe, store)
    assert out["000000000009.jpg"].status == "source_error" and "COCO_ROOT" in out["000000000009.jpg"].detail
    monkeypatch.setenv("COCO_ROOT", str(tmp_path / "coco"))
    out = fetch(["images/000000000009.jpg"], recipe, store)  # set, but not allowed (--env-allow)
    assert out["images/000000000009.jpg"].status == "source_error"
    assert "--env-allow COCO_ROOT" in out["images/000000000009.jpg"].detail
    # a root the run may read: under a --media-root (the policy refuses any other folder)
    allowed = FetchContext(media_roots=(str(tmp_path),), env_allow=("COCO_ROOT",))
    out = fetch(["images/000000000009.jpg"], recipe, store, context=allowed)
    assert read_outcome(out["images/000000000009.jpg"], store) == img(9)
    # the value is a secret: the upstream shows the variable's name
    assert out["images/000000000009.jpg"].upstream is not None
    assert str(tmp_path / "coco") not in (outcome_columns(out["images/000000000009.jpg"])["upstream"] or "")


def test_each_upstream_object_is_fetched_once_across_subsets(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/shared/1.jpg", img(1))
    a = make_recipe(
        {"kind": "http_files", "allow_private": True, "url": srv.url("/shared/{name}")}, subset="a"
    )
    b = make_recipe(
        {"kind": "http_files", "allow_private": True, "url": srv.url("/shared/{name}")}, subset="b"
    )
    first = fetch(["1.jpg", "x/1.jpg"], a, store)  # two refs, one upstream object: one request
    second = fetch(["other/1.jpg"], b, store)
    assert srv.completed("/shared/1.jpg") == 1
    assert first["1.jpg"].sha256 == first["x/1.jpg"].sha256 == second["other/1.jpg"].sha256
    assert second["other/1.jpg"].cached


@pytest.mark.parametrize("damage", [b"", b'{"upstream": "elsewhere"', b'{"upstream": "x", "sha256": "00"}'])
def test_a_damaged_upstream_index_entry_costs_one_refetch_and_nothing_else(
    srv: HttpFixture, store: ContentStore, damage: bytes
) -> None:
    # index entries are not synced to disk (one flush per object saved): a power loss may leave one empty
    # or stale, and lookup must then fall back to fetching the object again, never trust the entry
    srv.add("/d/1.jpg", img(1))
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/d/{name}")})
    first = fetch(["1.jpg"], recipe, store)["1.jpg"]
    (entry,) = [p for p in Path(store.root).rglob("*.json") if "1.jpg" in p.read_text()]
    entry.write_bytes(damage.replace(b'"x"', f'"{srv.url("/d/1.jpg")}"'.encode()))
    again = fetch(["1.jpg"], recipe, store)["1.jpg"]
    assert srv.completed("/d/1.jpg") == 2
    assert (again.status, again.sha256, again.cached) == ("ok", first.sha256, False)
    assert store.get(again.sha256) == img(1)
    third = fetch(["1.jpg"], recipe, store)["1.jpg"]  # the entry was written again, whole
    assert third.cached and srv.completed("/d/1.jpg") == 2


def test_failures_are_outcomes_and_stats(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/i/ok.jpg", img(1))
    srv.add("/i/gone.jpg", img(2), Fault("404"))
    srv.add("/i/page.jpg", img(3), Fault("html"))
    srv.add("/i/down.jpg", img(4), Fault("500"))
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/i/{name}")})
    res = fetch_batch(
        ["ok.jpg", "gone.jpg", "page.jpg", "down.jpg", "../etc/passwd"],
        recipe,
        store,
        client=HttpClient(HTTP),
        options=OPTS,
    )
    status = {r: o.status for r, o in res.outcomes.items()}
    assert status == {
        "ok.jpg": "ok",
        "gone.jpg": "http_404",
        "page.jpg": "html_page",
        "down.jpg": "http_5xx",
        "../etc/passwd": "no_source",
    }
    assert res.outcomes["down.jpg"].attempts == 2 and res.outcomes["down.jpg"].transient
    st = res.stats
    assert (st.refs, st.ok, st.fetched, st.failed) == (5, 1, 1, 4)
    assert st.failures == {"http_404": 1, "html_page": 1, "http_5xx": 1, "no_source": 1}
    assert st.bytes_fetched == len(img(1)) and st.bytes_stored == len(img(1))
    merged = st + FetchStats(refs=1, failures={"http_404": 2})
    assert merged.refs == 6 and merged.failures["http_404"] == 3
    assert "files/s" in st.summary()


def test_stream_hands_over_each_ok_object_while_the_batch_still_fetches(
    srv: HttpFixture, store: ContentStore
) -> None:
    srv.add("/i/fast.jpg", img(1))
    srv.add("/i/slow.jpg", img(2), Fault("delay", delay=1.5))
    srv.add("/i/gone.jpg", img(3), Fault("404"))
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/i/{name}")})
    refs = ["fast.jpg", "slow.jpg", "gone.jpg", "again/fast.jpg"]
    stream = FetchStream(refs, recipe, store, client=HttpClient(HTTP), options=OPTS)
    seen = []
    for outcome in stream:
        # the first object is readable from the store before the slow one has arrived
        seen.append((outcome.ref, srv.completed("/i/slow.jpg"), read_outcome(outcome, store)))
    res = stream.result()
    assert seen[0] == ("fast.jpg", 0, img(1))
    assert sorted(r for r, _, _ in seen) == ["again/fast.jpg", "fast.jpg", "slow.jpg"]  # once each, ok only
    assert res.outcomes["gone.jpg"].status == "http_404" and res.stats.ok == 3
    with pytest.raises(RecipeError, match="draft"):
        list(draft := FetchStream(["a.jpg"], make_recipe({"kind": "release_tar"}, status="draft"), store))
        draft.result()


def test_mirror_fallback_prefers_a_transient_failure(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/primary/a.jpg", img(1), Fault("500"))
    srv.add("/mirror/a.jpg", img(1))
    srv.add("/primary/b.jpg", img(2), Fault("500"))
    recipe = make_recipe(
        {"kind": "http_files", "allow_private": True, "url": srv.url("/primary/{name}")},
        {"kind": "http_files", "allow_private": True, "url": srv.url("/mirror/{name}")},
    )
    out = fetch(["a.jpg", "b.jpg"], recipe, store)
    assert out["a.jpg"].ok and out["a.jpg"].upstream == srv.url("/mirror/a.jpg")
    # b.jpg: the primary is down (transient), the mirror lacks it (permanent): report the transient one
    assert out["b.jpg"].status == "http_5xx" and "also tried http_files: http_404" in out["b.jpg"].detail


def test_match_restricts_a_source(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/charts/a.png", img(1))
    recipe = make_recipe(
        {
            "kind": "http_files",
            "allow_private": True,
            "url": srv.url("/charts/{file}"),
            "match": r"^train/png/(?P<file>[^/]+)$",
        }
    )
    out = fetch(["train/png/a.png", "val/png/a.png"], recipe, store)
    assert out["train/png/a.png"].ok
    assert out["val/png/a.png"].status == "no_source"


def test_expected_sha256_mismatch(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/e/a.jpg", img(1))
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/e/{name}")})
    out = fetch(["a.jpg"], recipe, store, expected={"a.jpg": "0" * 64})
    assert out["a.jpg"].status == "hash_mismatch"
    assert not store.has(hashlib.sha256(img(1)).hexdigest())  # a mismatching object is not kept
    good = hashlib.sha256(img(1)).hexdigest()
    assert fetch(["a.jpg"], recipe, store, expected={"a.jpg": good})["a.jpg"].ok


@pytest.mark.parametrize(
    ("per_host", "source_limit", "share", "most"), [(8, None, 4, 2), (8, 6, 3, 2), (8, None, 16, 1)]
)
def test_per_host_limits_are_run_wide_and_split_between_the_batches_fetching_at_once(
    srv: HttpFixture, store: ContentStore, per_host: int, source_limit: int | None, share: int, most: int
) -> None:
    for i in range(12):
        srv.add(f"/h/{i}.jpg", img(i), Fault("delay", delay=0.05))
    extra = {"max_concurrency": source_limit} if source_limit else {}
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/h/{name}"), **extra})
    options = FetchKnobs(
        concurrency=8, http=HttpOptions(per_host=per_host, retries=0, seed=0), host_share=share
    )
    res = fetch_batch([f"{i}.jpg" for i in range(12)], recipe, store, options=options)
    assert res.stats.ok == 12
    assert srv.max_in_flight == most  # this batch's share: the limit // the batches, at least one


def test_large_objects_spill_to_disk_and_publish_by_rename(srv: HttpFixture, store: ContentStore) -> None:
    big = img(7) * 2000  # ~0.4 MB
    srv.add("/v/clip.mp4", big)
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/v/{name}")})
    out = fetch_batch(
        ["clip.mp4"],
        recipe,
        store,
        client=HttpClient(HTTP),
        options=FetchKnobs(spill_bytes=4096, http=HTTP),
    ).outcomes
    assert store.get(out["clip.mp4"].sha256) == big
    assert list(Path(store.incoming_dir()).iterdir()) == []


def test_draft_recipes_are_refused(store: ContentStore) -> None:
    draft = make_recipe({"kind": "release_tar"}, status="draft")
    with pytest.raises(RecipeError, match="draft"):
        fetch_batch(["a.jpg"], draft, store)
    assert fetch_batch(["a.jpg"], draft, store, allow_draft=True).outcomes["a.jpg"].status == "not_found"


def test_duckdb_shows_the_failed_refs_and_a_later_run_retries_exactly_those(
    srv: HttpFixture, store: ContentStore, tmp_path: Path
) -> None:
    refs = [f"{i}.jpg" for i in range(10)]
    for i in range(10):
        srv.add(f"/d/{i}.jpg", img(i))
    srv.fault("/d/3.jpg", Fault("503"))
    srv.fault("/d/7.jpg", Fault("truncated"))
    recipe = make_recipe({"kind": "http_files", "allow_private": True, "url": srv.url("/d/{name}")})
    out = fetch(refs, recipe, store)
    # The media manifest rows (the proposed fetch columns), written and queried as the pipeline would.
    schema = pa.schema([pa.field("subset", pa.string()), pa.field("ref", pa.string()), *MEDIA_FETCH_FIELDS])
    rows = [{"subset": "s", "ref": r} | outcome_columns(o) for r, o in out.items()]
    part = tmp_path / "manifests" / "media" / "subset=s" / "part-00000.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), part)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW media AS SELECT * FROM read_parquet('{part}')")
    failed = con.sql(FAILED_REFS_SQL).fetchall()
    assert [(r[1], r[3]) for r in failed] == [("3.jpg", "http_5xx"), ("7.jpg", "truncated")]
    # The host recovers; the next run asks for every reference again and fetches only the failed ones.
    srv.fault("/d/3.jpg", None)
    srv.fault("/d/7.jpg", None)
    srv.reset_log()
    again = fetch(refs, recipe, store)
    assert all(o.ok for o in again.values())
    assert sorted(q.path for q in srv.requests()) == ["/d/3.jpg", "/d/7.jpg"]
    assert sum(o.cached for o in again.values()) == 8


# ------------------------------------------------------------------------------------------------- s3


def test_s3_objects_and_s3_hosted_zip(
    moto_s3: str, store: ContentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    fs = s3fs.S3FileSystem(anon=False, client_kwargs={"endpoint_url": moto_s3})
    fs.mkdir("open-images-dataset")
    fs.pipe("open-images-dataset/train/0001eeaf4aed83f9.jpg", img(1))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("CLEVR_v1.0/images/train/CLEVR_train_000001.png", b"\x89PNGclevr")
    fs.pipe("open-images-dataset/CLEVR_v1.0.zip", buf.getvalue())
    recipe = make_recipe(
        {
            "kind": "s3",
            "url": "s3://open-images-dataset/train/{name}",
            "anon": False,
            "endpoint_url": moto_s3,
            "match": r"\.jpg$",
        },
        {
            "kind": "archive",
            "allow_private": True,
            "url": "s3://open-images-dataset/CLEVR_v1.0.zip",
            "member": "CLEVR_v1.0/images/train/{name}",
            "match": r"\.png$",
            "storage_options": {"anon": False, "client_kwargs": {"endpoint_url": moto_s3}},
        },
    )
    out = fetch(
        ["openimages/0001eeaf4aed83f9.jpg", "ffffffffffffffff.jpg", "CLEVR_train_000001.png"], recipe, store
    )
    ok = out["openimages/0001eeaf4aed83f9.jpg"]
    assert ok.source == "s3" and read_outcome(ok, store) == img(1)
    assert ok.upstream == f"{moto_s3}/open-images-dataset/train/0001eeaf4aed83f9.jpg"
    assert out["ffffffffffffffff.jpg"].status == "http_404"
    assert read_outcome(out["CLEVR_train_000001.png"], store) == b"\x89PNGclevr"
    again = fetch(["openimages/0001eeaf4aed83f9.jpg"], recipe, store)
    assert again["openimages/0001eeaf4aed83f9.jpg"].cached


def test_hf_source_urls_offline() -> None:
    recipe = make_recipe(
        {
            "kind": "hf",
            "repo": "pixparse/cc3m-wds",
            "revision": "46f3d69f840e59d77d52e8decfe5baec97e94c7f",
            "path": "images/{name}",
        }
    )
    src = recipe.sources[0]
    from vlmforge.schemas.recipes import fill, ref_variables

    url = src.fsspec_url(fill(src.path, ref_variables("a/b.jpg", None) or {}))  # type: ignore[union-attr]
    assert url == "hf://datasets/pixparse/cc3m-wds@46f3d69f840e59d77d52e8decfe5baec97e94c7f/images/b.jpg"
    branch = make_recipe(
        {"kind": "hf", "repo": "o/n", "revision": "refs/convert/parquet", "repo_type": "model"}
    )
    assert branch.sources[0].fsspec_url("x") == "hf://o/n@refs%2Fconvert%2Fparquet/x"  # type: ignore[union-attr]
    from vlmforge.tasks.storage import url_to_fs

    fs, path = url_to_fs(url)  # huggingface_hub's HfFileSystem parses it without a request
    assert path.startswith("datasets/pixparse/cc3m-wds@")
