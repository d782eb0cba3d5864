"""The estimate's parts on their own (no Prefect, no Ray): a size without a body from a server that refuses
HEAD, the release tars' member tables read by seeking equal to the run's streamed index, a recipe's sources
tried in the fetch stage's order, the sampling interval, the references the parser keeps, the hours."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from http_fixture import HttpFixture

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.estimate.hours import Rates, parse_bandwidth, run_hours
from vlmforge.tasks.estimate.references import subset_references
from vlmforge.tasks.estimate.sizes import size_references
from vlmforge.tasks.fetch.release_media import ReleaseMedia
from vlmforge.tasks.fetch.size_probes import IndexedReleaseMedia, http_size
from vlmforge.tasks.fetch.sizing import Miss, Sized, SizingContext
from vlmforge.tasks.http.client import HttpClient, HttpOptions

BODY = bytes(range(256)) * 40


class _NoHead(BaseHTTPRequestHandler):
    """A server that refuses HEAD (405) and answers a ranged GET with Content-Range, logging what it sent."""

    protocol_version = "HTTP/1.1"
    sent: list[tuple[str, int]] = []

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    # Each request is logged before its answer goes out: logged after, the client could have its answer
    # (and the test read the log) before this thread appended to it.
    def do_HEAD(self) -> None:
        self.sent.append(("HEAD", 0))
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        rng = self.headers.get("Range", "")
        start, end = (int(x) for x in rng.removeprefix("bytes=").split("-"))
        body = BODY[start : end + 1]
        self.sent.append(("GET", len(body)))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(BODY)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def no_head() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoHead)
    _NoHead.sent = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/x.jpg"
    finally:
        server.shutdown()
        server.server_close()


def test_a_size_without_a_body_when_head_is_refused(no_head: str) -> None:
    client = HttpClient(HttpOptions(retries=0))
    assert http_size(client, no_head) == len(BODY)
    assert _NoHead.sent == [("HEAD", 0), ("GET", 1)]  # one byte, the total from Content-Range


def test_head_gives_the_size_and_a_404_is_a_miss(srv: HttpFixture) -> None:
    srv.add("/a.jpg", BODY)
    client = HttpClient(HttpOptions(retries=0))
    assert http_size(client, srv.url("/a.jpg")) == len(BODY)
    with pytest.raises(Exception) as err:
        http_size(client, srv.url("/gone.jpg"))
    assert getattr(err.value, "failure", None) == "http_404"
    assert [(r.method, r.sent) for r in srv.requests()] == [("HEAD", 0), ("HEAD", 0)]


def _tar(path: Path) -> None:
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, body in (
            ("a.jpg", b"a" * 700),
            ("deep/" + "n" * 120 + ".jpg", b"b" * 1500),
            ("c.jpg", b""),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("link.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)


def test_member_tables_by_seeking_equal_the_runs_streamed_index(tmp_path: Path) -> None:
    (tmp_path / "media").mkdir()
    _tar(tmp_path / "media" / "shard_000.tar")
    tars = (str(tmp_path / "media" / "shard_000.tar"),)
    ours, runs = IndexedReleaseMedia(str(tmp_path), tars), ReleaseMedia(str(tmp_path), tars)
    for ref in ("a.jpg", "deep/" + "n" * 120 + ".jpg", "c.jpg", "link.jpg", "nope.jpg"):
        assert ours.locate(ref) == runs.locate(ref), ref
    hit = ours.locate("a.jpg")
    assert hit is not None and hit[1].size == 700
    assert ours.locate("link.jpg") is None  # a link is never served


def _release(root: Path, refs: list[str]) -> Path:
    folder = root / "rel" / "sub"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("License: CC0-1.0\n")
    lines = [
        json.dumps(
            {
                "id": f"r{i}",
                "messages": [
                    {"role": "user", "content": [{"type": "image", "image": r}, "?"]},
                    {"role": "assistant", "content": "ok"},
                ],
            }
        )
        for i, r in enumerate(refs)
    ]
    lines.append(lines[0])  # a duplicate row: rejected by the run, no reference here either
    lines.append("{not json")
    (folder / "sub.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_sources_are_tried_in_order_and_a_miss_falls_through(tmp_path: Path, srv: HttpFixture) -> None:
    folder = _release(tmp_path, ["on_web.jpg", "local.jpg", "nowhere.jpg", "../../etc/passwd"])
    (folder / "local.jpg").write_bytes(b"x" * 321)
    srv.add("/m/on_web.jpg", BODY)
    (entry,) = catalog_release(str(tmp_path / "rel"))
    refs = subset_references(entry)
    assert (refs.rows, refs.records, refs.refs) == (6, 3, 3)  # duplicate, bad JSON and unsafe ref rejected
    recipe = parse_recipe(
        {
            "subset": "sub",
            "license": "CC0-1.0",
            "sources": [
                {"kind": "http_files", "allow_private": True, "url": srv.url("/m/{name}")},
                {"kind": "release_tar"},
            ],
        }
    )
    with ThreadPoolExecutor(4) as pool:
        ctx = SizingContext(entry, HttpClient(HttpOptions(retries=0)), pool, probe_sample=10)
        got = size_references(refs.distinct, recipe, ctx)
    web = got["on_web.jpg"]
    assert isinstance(web, Sized) and (web.locator, web.kind, web.size) == (
        srv.url("/m/on_web.jpg"),
        "http_files",
        len(BODY),
    )
    assert web.probed and web.transfer is None  # fetched whole: its size is its transfer
    local = got["local.jpg"]
    assert isinstance(local, Sized) and (local.kind, local.size, local.transfer) == ("release_tar", 321, 0)
    assert isinstance(got["nowhere.jpg"], Miss) and got["nowhere.jpg"].failure == "not_found"


def test_unmeasured_sizes_carry_an_interval_and_a_full_sample_is_exact(
    tmp_path: Path, srv: HttpFixture
) -> None:
    from vlmforge.tasks.estimate.disk import DEFAULT
    from vlmforge.tasks.estimate.tally import SubsetSizing, tally

    sizes = [1000 + 37 * i for i in range(30)]
    for i, n in enumerate(sizes):
        srv.add(f"/m/p{i}.jpg", b"z" * n)
    _release(tmp_path, [f"p{i}.jpg" for i in range(30)])
    (entry,) = catalog_release(str(tmp_path / "rel"))
    refs = subset_references(entry)
    recipe = parse_recipe(
        {
            "subset": "sub",
            "license": "CC0-1.0",
            "sources": [{"kind": "http_files", "allow_private": True, "url": srv.url("/m/{name}")}],
        }
    )
    rows = {}
    for sample in (8, 30):
        with ThreadPoolExecutor(4) as pool:
            ctx = SizingContext(entry, HttpClient(HttpOptions(retries=0)), pool, probe_sample=sample)
            answers = size_references(refs.distinct, recipe, ctx)
        s = SubsetSizing(entry, refs, answers, ctx.strata, ctx.stratum_objects, ctx.streamed, DEFAULT)
        rows[sample] = tally(
            [s], cores=1, bandwidth=1e6, rates=Rates(), estimate_id="x", release="r", settings="{}"
        )[0]
    part, full = rows[8], rows[30]
    assert part.bytes_method == "sampled" and part.probed == 8
    assert part.bytes_low < sum(sizes) < part.bytes_high
    assert full.bytes_method == "exact" and full.bytes == full.bytes_low == full.bytes_high == sum(sizes)


def test_hours_name_the_bottleneck() -> None:
    rates = Rates(image_seconds=0.1, video_seconds=1.0, row_seconds=0.0, disk_bytes_per_s=1e9)
    slow_net = run_hours(
        images=3600, videos=0, rows=0, fetch_bytes=10**12, disk_bytes=0, cores=10, bandwidth=1e6, rates=rates
    )
    assert slow_net.bottleneck == "network" and slow_net.cpu == pytest.approx(0.01)
    busy_cpu = run_hours(
        images=3600, videos=0, rows=0, fetch_bytes=0, disk_bytes=0, cores=1, bandwidth=1e9, rates=rates
    )
    assert busy_cpu.bottleneck == "cpu" and busy_cpu.total == pytest.approx(0.1)
    assert (
        parse_bandwidth("1Gbit") == 125e6
        and parse_bandwidth("50MB/s") == 50e6
        and parse_bandwidth("10") == 10
    )


def test_a_tar_at_a_url_costs_its_whole_size_once(tmp_path: Path, srv: HttpFixture) -> None:
    from vlmforge.tasks.estimate.disk import DEFAULT
    from vlmforge.tasks.estimate.tally import SubsetSizing, tally

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for i in range(5):
            info = tarfile.TarInfo(f"v{i}.jpg")
            info.size = 1000
            tf.addfile(info, io.BytesIO(b"v" * 1000))
    srv.add("/a/videos.tar", buf.getvalue())
    _release(tmp_path, ["v0.jpg", "v1.jpg", "v2.jpg"])
    (entry,) = catalog_release(str(tmp_path / "rel"))
    refs = subset_references(entry)
    source = {"kind": "archive", "allow_private": True, "url": srv.url("/a/videos.tar")}
    recipe = parse_recipe({"subset": "sub", "license": "CC0-1.0", "sources": [source]})
    with ThreadPoolExecutor(2) as pool:
        ctx = SizingContext(entry, HttpClient(HttpOptions(retries=0)), pool)
        answers = size_references(refs.distinct, recipe, ctx)
    assert all(isinstance(a, Sized) and a.bound for a in answers.values()) and len(answers) == 3
    s = SubsetSizing(entry, refs, answers, ctx.strata, ctx.stratum_objects, ctx.streamed, DEFAULT)
    (row, _) = tally([s], cores=1, bandwidth=1e6, rates=Rates(), estimate_id="x", release="r", settings="{}")
    assert row.bytes_method == "bound" and row.fetch_bytes == row.bytes_high == len(buf.getvalue())
    assert [(r.method, r.sent) for r in srv.requests()] == [("HEAD", 0)]  # one request for the archive
