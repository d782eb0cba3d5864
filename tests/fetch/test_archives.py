"""Archives on a real loopback server: zip members by range requests, tar streamed once, slip members
rejected and never stored, published hashes checked."""

from __future__ import annotations

import hashlib
import io
import random
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from http_fixture import Fault, HttpFixture

from vlmforge.schemas.recipes import Recipe, parse_recipe
from vlmforge.tasks.archives.archive_members import normalize_member, unsafe_member_reason
from vlmforge.tasks.archives.zip_format import plan_ranges
from vlmforge.tasks.fetch.acquire import fetch_batch, read_outcome
from vlmforge.tasks.fetch.options import FetchKnobs
from vlmforge.tasks.fetch.outcomes import FetchResult
from vlmforge.tasks.fetch.zip_fetch import forget_zip_indexes
from vlmforge.tasks.http.client import HttpClient, HttpOptions
from vlmforge.tasks.storage import ContentStore

OPTS = FetchKnobs(concurrency=4, http=HttpOptions(backoff_base=0.01, retries=1, seed=0))


def payload(i: int, n: int = 5000) -> bytes:
    return random.Random(i).randbytes(n)


def make_zip(members: dict[str, bytes], *, stored: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def make_tar(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:  # type: ignore[call-overload]
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                t.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                t.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def recipe(**source: Any) -> Recipe:
    return parse_recipe(
        {
            "subset": "t",
            "license": "CC-BY-4.0",
            "sources": [{"kind": "archive", "allow_private": True, **source}],
        }
    )


def run(refs: list[str], r: Recipe, store: ContentStore, **kw: Any) -> FetchResult:
    forget_zip_indexes()  # each call starts like a fresh worker process
    return fetch_batch(refs, r, store, client=HttpClient(OPTS.http), options=OPTS, **kw)


def objects(store: ContentStore) -> set[str]:
    root = Path(store.root)
    return {p.name for p in root.glob("??/*") if len(p.parent.name) == 2 and ".tmp-" not in p.name}


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(str(tmp_path / "store"))


def test_zip_reads_one_percent_of_members_by_range(srv: HttpFixture, store: ContentStore) -> None:
    members = {f"train2017/{i:012d}.jpg": payload(i) for i in range(2000)}
    data = make_zip(members, stored=True)  # random bytes do not compress: ~10 MB
    srv.add("/train2017.zip", data)
    r = recipe(url=srv.url("/train2017.zip"), member="train2017/{name}")
    refs = [f"{i:012d}.jpg" for i in range(0, 2000, 100)]  # 1%
    res = run(refs, r, store)
    assert all(o.ok for o in res.outcomes.values()), res.outcomes
    for ref in refs:
        o = res.outcomes[ref]
        assert read_outcome(o, store) == members[f"train2017/{ref}"]
        assert o.upstream == f"{srv.url('/train2017.zip')}#train2017/{ref}"
    sent = srv.bytes_sent()
    assert sent < 0.05 * len(data)  # central directory (~130 KB, two requests) + 20 members
    assert all(q.range for q in srv.requests())  # never a whole-archive GET
    assert res.stats.bytes_fetched == sent


def test_zip_central_directory_is_cached_in_the_store(srv: HttpFixture, store: ContentStore) -> None:
    members = {f"img/{i}.png": payload(i, 300) for i in range(50)}
    srv.add("/a.zip", make_zip(members))
    r = recipe(url=srv.url("/a.zip"), member="img/{ref}")
    assert run(["1.png"], r, store).outcomes["1.png"].ok
    srv.reset_log()
    res = run(["2.png", "40.png"], r, store)
    assert [o.ok for o in res.outcomes.values()] == [True, True]
    assert not any(q.range and q.range.startswith("bytes=-") for q in srv.requests())  # no tail read again


def test_zip_crc_mismatch_is_hash_mismatch(srv: HttpFixture, store: ContentStore) -> None:
    members = {"a.jpg": payload(1), "b.jpg": payload(2)}
    data = bytearray(make_zip(members, stored=True))
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("a.jpg")
    data[info.header_offset + 30 + len("a.jpg") + 10] ^= 0xFF  # flip one byte of a.jpg's data
    srv.add("/bad.zip", bytes(data))
    res = run(["a.jpg", "b.jpg"], recipe(url=srv.url("/bad.zip")), store)
    assert res.outcomes["a.jpg"].status == "hash_mismatch" and "CRC-32" in (
        res.outcomes["a.jpg"].detail or ""
    )
    assert res.outcomes["b.jpg"].ok
    assert objects(store) == {hashlib.sha256(members["b.jpg"]).hexdigest()} | _cd_objects(store)


def _cd_objects(store: ContentStore) -> set[str]:
    """Objects holding cached zip central directories."""
    out = set()
    for p in Path(store.root, "upstream").rglob("*.json"):
        import json

        entry = json.loads(p.read_text())
        if entry["upstream"].startswith("zip-central-directory:"):
            out.add(entry["sha256"])
    return out


def test_zip_slip_symlink_and_absolute_members_are_rejected(srv: HttpFixture, store: ContentStore) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("ok.jpg"), b"\xff\xd8fine")
        z.writestr(zipfile.ZipInfo("/abs.jpg"), b"absolute")
        z.writestr(zipfile.ZipInfo("a/../dotdot.jpg"), b"dotdot")
        z.writestr(zipfile.ZipInfo("../escape.jpg"), b"escape")
        link = zipfile.ZipInfo("link.jpg")
        link.external_attr = 0o120777 << 16  # a symlink to /etc/passwd
        z.writestr(link, b"/etc/passwd")
    srv.add("/slip.zip", buf.getvalue())
    refs = ["ok.jpg", "abs.jpg", "dotdot.jpg", "link.jpg", "escape.jpg"]
    res = run(refs, recipe(url=srv.url("/slip.zip")), store)
    status = {r: o.status for r, o in res.outcomes.items()}
    assert status == {
        "ok.jpg": "ok",
        "abs.jpg": "unsafe_member",
        "dotdot.jpg": "unsafe_member",
        "link.jpg": "unsafe_member",
        "escape.jpg": "not_in_archive",  # '../escape.jpg' can never match a safe reference
    }
    assert "symlink" in (res.outcomes["link.jpg"].detail or "")
    assert objects(store) - _cd_objects(store) == {hashlib.sha256(b"\xff\xd8fine").hexdigest()}


def test_zip_on_a_server_without_range_support(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/nr.zip", make_zip({"a.jpg": b"x"}), Fault("no_range"))
    o = run(["a.jpg"], recipe(url=srv.url("/nr.zip")), store).outcomes["a.jpg"]
    assert o.status == "source_error" and "ignores Range" in (o.detail or "")


def test_not_a_zip(srv: HttpFixture, store: ContentStore) -> None:
    srv.add("/fake.zip", b"<html>not found</html>" * 10)
    o = run(["a.jpg"], recipe(url=srv.url("/fake.zip")), store).outcomes["a.jpg"]
    assert o.status == "bad_archive"


def test_missing_archive_is_404(srv: HttpFixture, store: ContentStore) -> None:
    o = run(["a.jpg"], recipe(url=srv.url("/nothere.zip")), store).outcomes["a.jpg"]
    assert o.status == "http_404"


def test_zip_from_a_local_path(tmp_path: Path, store: ContentStore) -> None:
    z = tmp_path / "mirror" / "MapQA_S.zip"
    z.parent.mkdir()
    z.write_bytes(make_zip({"MapQA_S/images/map_1.png": b"\x89PNGone"}))
    r = recipe(
        url=str(tmp_path / "mirror" / "MapQA_{v}.zip"),
        member="MapQA_{v}/images/{name}",
        match=r"^(?P<v>[SUV])/",
    )
    res = run(["S/map_1.png", "U/map_1.png"], r, store)
    assert read_outcome(res.outcomes["S/map_1.png"], store) == b"\x89PNGone"
    assert res.outcomes["U/map_1.png"].status == "not_found"  # MapQA_U.zip is not in the mirror


def test_tar_streamed_once_with_slip_members_rejected(srv: HttpFixture, store: ContentStore) -> None:
    sym = tarfile.TarInfo("link.jpg")
    sym.type, sym.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("hard.jpg")
    hard.type, hard.linkname = tarfile.LNKTYPE, "ok.jpg"
    data = make_tar(
        [
            ("ok.jpg", b"\xff\xd8ok"),
            ("../escape.jpg", b"escape"),
            ("/abs.jpg", b"absolute"),
            ("a/../dotdot.jpg", b"dotdot"),
            sym,
            hard,
            ("other.jpg", b"\xff\xd8other"),
        ]
    )
    srv.add("/m.tar", data)
    refs = ["ok.jpg", "abs.jpg", "dotdot.jpg", "link.jpg", "hard.jpg", "missing.jpg"]
    res = run(refs, recipe(url=srv.url("/m.tar")), store)
    status = {r: o.status for r, o in res.outcomes.items()}
    assert status == {
        "ok.jpg": "ok",
        "abs.jpg": "unsafe_member",
        "dotdot.jpg": "unsafe_member",
        "link.jpg": "unsafe_member",
        "hard.jpg": "unsafe_member",
        "missing.jpg": "not_in_archive",
    }
    assert len(srv.requests("/m.tar")) == 1
    assert objects(store) == {hashlib.sha256(b"\xff\xd8ok").hexdigest()}


def test_tar_extract_all_serves_later_batches_without_a_stream(srv: HttpFixture, store: ContentStore) -> None:
    members = [(f"shard/{i}.jpg", payload(i, 200)) for i in range(20)]
    srv.add("/cc3m-0000.tar", make_tar([*members, ("../x.jpg", b"slip")]))
    r = recipe(url=srv.url("/cc3m-0000.tar"), member="shard/{ref}", extract="all")
    assert run(["0.jpg"], r, store).outcomes["0.jpg"].ok
    assert len(objects(store)) == 20  # every safe member, the slip member never
    srv.reset_log()
    res = run([f"{i}.jpg" for i in range(1, 20)], r, store)
    assert all(o.ok and o.cached for o in res.outcomes.values())
    assert srv.requests() == []


def test_tar_gz_and_published_sha256(srv: HttpFixture, store: ContentStore) -> None:
    data = make_tar([("a.jpg", b"\xff\xd8a"), ("b.jpg", b"\xff\xd8b")], mode="w:gz")
    srv.add("/good.tar.gz", data)
    srv.add("/bad.tar.gz", data)
    good = recipe(url=srv.url("/good.tar.gz"), sha256=hashlib.sha256(data).hexdigest())
    res = run(["a.jpg"], good, store)
    assert read_outcome(res.outcomes["a.jpg"], store) == b"\xff\xd8a"
    bad = recipe(url=srv.url("/bad.tar.gz"), sha256="0" * 64)
    other = ContentStore(str(Path(store.root).parent / "other"))
    o = run(["b.jpg"], bad, other).outcomes["b.jpg"]
    assert o.status == "hash_mismatch" and "published" in (o.detail or "")
    assert objects(other) == set()  # nothing from an archive that fails its hash is stored


def test_truncated_tar_stream(srv: HttpFixture, store: ContentStore) -> None:
    data = make_tar([(f"{i}.jpg", payload(i, 20_000)) for i in range(5)])
    srv.add("/cut.tar", data[: len(data) // 2], Fault("no_range"))  # a short file: the stream just ends
    o = run(["4.jpg"], recipe(url=srv.url("/cut.tar")), store).outcomes["4.jpg"]
    assert o.status == "truncated"


def test_member_helpers() -> None:
    assert normalize_member("./a//b/../c.jpg") == "a/c.jpg"
    assert normalize_member("/abs.jpg") == "abs.jpg"
    assert unsafe_member_reason("/abs.jpg") == "absolute member path"
    assert unsafe_member_reason("C:/x.jpg") == "absolute member path"
    assert unsafe_member_reason("a/../b.jpg") is not None
    assert unsafe_member_reason("a/b.jpg") is None


def test_plan_ranges_coalesces_neighbours() -> None:
    from vlmforge.tasks.archives.zip_format import ZipEntry

    def e(off: int) -> ZipEntry:
        return ZipEntry("x", off, 1000, 1000, 0, 0, 0, 0, 1, 0)

    groups = plan_ranges([e(0), e(2000), e(10_000_000), e(10_001_000)], gap=64 * 1024)
    assert [[x.header_offset for x in g] for g in groups] == [[0, 2000], [10_000_000, 10_001_000]]
