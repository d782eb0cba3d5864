"""Release tars whose headers lie about a member's size (``tasks/archives/tar_index.py``): the member table is
read by seeking, a member claiming more than the tar holds is a ``truncated`` miss of its own reference
(found while indexing, never read), the members before it are served, every read is bounded by the file's
real size, and a batch deadline stops indexing (its misses are ``timeout``)."""

from __future__ import annotations

import io
import re
import tarfile
import time
from pathlib import Path

import pytest

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.archives.tar_index import IndexDeadline, claims_past_end, seek_members
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext
from vlmforge.tasks.fetch.outcomes import LocalLocation
from vlmforge.tasks.fetch.release_media import MediaResolver, MissingMedia, read_location
from vlmforge.tasks.storage import ContentStore

GB = 1024**3


def lying_tar(path: Path, claimed: int, *, fmt: int = tarfile.GNU_FORMAT, real: bytes = b"x" * 1000) -> Path:
    """good.jpg (real), then lie.jpg whose header claims ``claimed`` bytes followed by only ``real`` bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        good = tarfile.TarInfo("images/good.jpg")
        good.size = 5
        tf.addfile(good, io.BytesIO(b"good!"))
        data = buf.getvalue()[: tf.offset]
    lie = tarfile.TarInfo("images/lie.jpg")
    lie.size = claimed
    path.write_bytes(data + lie.tobuf(format=fmt) + real)
    return path


@pytest.mark.parametrize(
    ("claimed", "fmt"),
    [(100 * GB, tarfile.GNU_FORMAT), (2**60, tarfile.GNU_FORMAT), (100 * GB, tarfile.PAX_FORMAT)],
    ids=["100GB-gnu", "2^60-gnu", "100GB-pax"],
)
def test_a_member_claiming_more_than_the_tar_holds_is_a_truncated_miss(
    tmp_path: Path, claimed: int, fmt: int
) -> None:
    tar = lying_tar(tmp_path / "shard_000.tar", claimed, fmt=fmt)
    assert tar.stat().st_size < 4096
    t0 = time.monotonic()
    resolver = MediaResolver(str(tmp_path), (str(tar),))
    assert resolver.resolve("images/good.jpg").data == b"good!"
    with pytest.raises(MissingMedia) as info:
        resolver.resolve("lie.jpg")  # by file name, as the release's converter resolves
    assert time.monotonic() - t0 < 10  # a hang guard: the walk seeks, it never reads or skips the claim
    assert info.value.failure == "truncated"
    assert re.search(
        rf"tar member images/lie.jpg claims {claimed} bytes at offset \d+, but shard_000.tar", str(info.value)
    )
    media, sample = info.value.reasons("lie.jpg")
    assert (
        media.startswith("truncated: tar member images/lie.jpg claims")
        and sample == "media_error: lie.jpg: truncated"
    )


def test_the_release_tar_source_gives_the_same_verdict(tmp_path: Path) -> None:
    tar = lying_tar(tmp_path / "shard_000.tar", 2**60)
    recipe = parse_recipe({"subset": "s", "license": "MIT", "sources": [{"kind": "release_tar"}]})
    res = fetch_batch(
        ["images/lie.jpg", "images/good.jpg"],
        recipe,
        ContentStore(str(tmp_path / "store")),
        context=FetchContext(str(tmp_path), (str(tar),)),
    )
    assert res.outcomes["images/good.jpg"].ok
    lie = res.outcomes["images/lie.jpg"]
    assert lie.status == "truncated" and f"claims {2**60} bytes" in (lie.detail or ""), lie


def test_seek_members_stops_at_the_lie_and_reads_no_claimed_byte(tmp_path: Path) -> None:
    tar = lying_tar(tmp_path / "t.tar", 100 * GB)
    size = tar.stat().st_size

    class Counting(io.FileIO):
        read_bytes = 0

        def read(self, n: int = -1) -> bytes:  # type: ignore[override]
            data = super().read(n)
            Counting.read_bytes += len(data)
            return data

    with Counting(tar, "rb") as f:
        members = list(seek_members(f, size))
    assert [m.name for m in members] == ["images/good.jpg", "images/lie.jpg"]
    assert claims_past_end(members[1], size) and not claims_past_end(members[0], size)
    assert Counting.read_bytes <= size


def test_every_read_is_bounded_by_the_real_size(tmp_path: Path) -> None:
    tar = lying_tar(tmp_path / "t.tar", 100 * GB)
    with pytest.raises(MissingMedia, match="tar member truncated in t.tar: claims bytes 1536-") as info:
        read_location(LocalLocation(str(tar), offset=1536, size=100 * GB), "lie.jpg")
    assert info.value.failure == "truncated"
    with pytest.raises(MissingMedia, match="truncated"):
        read_location(LocalLocation(str(tar), offset=10 * GB, size=1), "far.jpg")


def test_the_batch_deadline_covers_indexing(tmp_path: Path) -> None:
    tar = lying_tar(tmp_path / "t.tar", 5, real=b"12345")
    with pytest.raises(IndexDeadline), tar.open("rb") as f:
        list(seek_members(f, tar.stat().st_size, deadline=time.monotonic() - 1))
    resolver = MediaResolver(str(tmp_path), (str(tar),), deadline=time.monotonic() - 1)
    with pytest.raises(MissingMedia, match="batch deadline came while indexing the media tars") as info:
        resolver.resolve("images/good.jpg")
    assert info.value.failure == "timeout"
    assert MediaResolver(str(tmp_path), (str(tar),)).resolve("lie.jpg").data == b"12345"  # an honest tar
