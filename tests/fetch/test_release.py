"""The release's media: resolution order, release tars read by offset, unsafe members never served, fsspec
URLs, and one verdict and text whether a batch resolves a reference or the ``release_tar`` source fetches
it."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import pytest

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext
from vlmforge.tasks.fetch.outcomes import LocalLocation
from vlmforge.tasks.fetch.release_media import MediaResolver, MissingMedia, read_location
from vlmforge.tasks.storage import ContentStore


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


def _fetch_release(subset: Path, tars: tuple[str, ...], ref: str) -> str:
    """The reason the ``release_tar`` recipe source gives for ``ref`` (``ok`` when it answers)."""
    recipe = parse_recipe({"subset": "s", "license": "MIT", "sources": [{"kind": "release_tar"}]})
    store = ContentStore(str(subset.parent / "store"))
    out = fetch_batch([ref], recipe, store, context=FetchContext(str(subset), tars)).outcomes[ref]
    return "ok" if out.ok else out.reason()


def test_the_resolver_and_the_release_tar_source_give_one_verdict_in_one_text(subset: Path) -> None:
    """One module reads the release: the same symlink rule, tar index and error text on both paths."""
    outside = subset.parent / "secret.txt"
    outside.write_bytes(b"secret")
    (subset / "leak.jpg").symlink_to(outside)
    (subset / "media" / "broken.tar").write_bytes(b"not a tar at all" * 64)
    tars = (str(subset / "media" / "shard_000000.tar"), str(subset / "media" / "broken.tar"))
    resolver = MediaResolver(str(subset), tars)
    symlink = "symlink in the release leads outside the subset folder: leak.jpg"
    with pytest.raises(MissingMedia, match=re.escape(f"unsafe reference ({symlink})")):
        resolver.resolve("leak.jpg")
    assert _fetch_release(subset, tars, "leak.jpg") == f"unsafe_member: {symlink}"
    missing = "media/ or media tars; unreadable media tar(s): broken.tar: "
    with pytest.raises(MissingMedia, match=re.escape(f"not found in media roots, subset folder, {missing}")):
        resolver.resolve("link.jpg")
    assert _fetch_release(subset, tars, "link.jpg").startswith(
        f"not_found: not found in subset folder, {missing}"
    )
    assert _fetch_release(subset, tars, "c.jpg") == "ok"


def test_a_member_cut_short_is_reported_by_the_tar_name(subset: Path) -> None:
    location = LocalLocation(str(subset / "media" / "shard_000000.tar"), offset=10**6, size=5)
    with pytest.raises(MissingMedia, match="tar member truncated in shard_000000.tar") as info:
        read_location(location, "c.jpg")
    assert info.value.failure == "truncated"
