"""Media resolution: order, release tars read by offset, unsafe members never served, fsspec URLs."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from vlmforge.tasks.fetch.resolve import MediaResolver, MissingMedia


def _tar(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)


@pytest.fixture
def subset(tmp_path: Path) -> Path:
    sub = tmp_path / "rel" / "s"
    (sub / "media").mkdir(parents=True)
    (sub / "images").mkdir()
    (sub / "images" / "a.jpg").write_bytes(b"loose a")
    (sub / "media" / "b.jpg").write_bytes(b"media b")
    _tar(
        sub / "media" / "shard_000000.tar",
        {"images/a.jpg": b"tar a", "c.jpg": b"tar c", "../escape.jpg": b"evil", "/abs.jpg": b"evil"},
        links={"link.jpg": "/etc/passwd"},
    )
    return sub


def test_resolution_order_and_tar_members(subset: Path, tmp_path: Path) -> None:
    tars = (str(subset / "media" / "shard_000000.tar"),)
    r = MediaResolver(str(subset), tars)
    assert (r.resolve("images/a.jpg").source, r.resolve("images/a.jpg").data) == ("subset", b"loose a")
    assert (r.resolve("b.jpg").source, r.resolve("b.jpg").data) == ("media", b"media b")
    assert (r.resolve("./c.jpg").source, r.resolve("./c.jpg").data) == ("tar:shard_000000.tar", b"tar c")
    root = tmp_path / "override"
    (root / "images").mkdir(parents=True)
    (root / "images" / "a.jpg").write_bytes(b"root a")
    assert MediaResolver(str(subset), tars, (str(root),)).resolve("images/a.jpg").data == b"root a"


@pytest.mark.parametrize(
    "ref", ["../escape.jpg", "/abs.jpg", "link.jpg", "abs.jpg", "escape.jpg", "nope.jpg"]
)
def test_unsafe_or_missing_members_are_never_served(subset: Path, ref: str) -> None:
    r = MediaResolver(str(subset), (str(subset / "media" / "shard_000000.tar"),))
    with pytest.raises(MissingMedia):
        r.resolve(ref)


def test_file_urls_and_storage_options(subset: Path) -> None:
    tars = (f"file://{subset}/media/shard_000000.tar",)
    r = MediaResolver(f"file://{subset}", tars, storage_options={"auto_mkdir": False})
    assert r.resolve("c.jpg").data == b"tar c"
    assert r.resolve("images/a.jpg").data == b"loose a"
