"""Release references as NVIDIA's converter reads them: a bare file name finds the one tar member of
that name, a path or name two members answer to is an ``ambiguous:`` miss (never first-wins), and names match
in Unicode NFC whichever form the file or member is stored in."""

from __future__ import annotations

import io
import os
import tarfile
import unicodedata
from pathlib import Path

import pytest

from vlmforge.schemas.recipes import parse_recipe
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext
from vlmforge.tasks.fetch.release_media import MediaResolver, MissingMedia
from vlmforge.tasks.storage import ContentStore

NFC = unicodedata.normalize("NFC", "café_über.jpg")
NFD = unicodedata.normalize("NFD", NFC)


def _tar(path: Path, members: list[tuple[str, bytes]]) -> str:
    """A tar with ``members`` in order (a name may repeat: appended like ``tar -r``)."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return str(path)


def _subset(tmp_path: Path) -> Path:
    sub = tmp_path / "rel" / "s"
    (sub / "media").mkdir(parents=True)
    return sub


def _source_verdict(subset: Path, tars: tuple[str, ...], ref: str) -> tuple[str, bytes | None]:
    """What the ``release_tar`` recipe source answers for ``ref``: ``ok`` and the bytes, or the reason."""
    recipe = parse_recipe({"subset": "s", "license": "MIT", "sources": [{"kind": "release_tar"}]})
    store = ContentStore(str(subset.parent / "store"))
    result = fetch_batch([ref], recipe, store, context=FetchContext(str(subset), tars))
    out = result.outcomes[ref]
    if not out.ok:
        return out.reason(), None
    assert out.location is not None
    with open(out.location.path, "rb") as f:
        f.seek(out.location.offset or 0)
        return "ok", f.read(out.location.size)


def test_a_bare_file_name_finds_the_one_member_of_that_name(tmp_path: Path) -> None:
    sub = _subset(tmp_path)
    tars = (
        _tar(sub / "media" / "shard_000000.tar", [("images/2024/a.jpg", b"A"), ("x/b.jpg", b"B")]),
        _tar(sub / "media" / "shard_000001.tar", [("c.jpg", b"C")]),
    )
    r = MediaResolver(str(sub), tars)
    for ref, data, tar in [("a.jpg", b"A", 0), ("other/dir/b.jpg", b"B", 0), ("images/2024/a.jpg", b"A", 0)]:
        got = r.resolve(ref)
        assert (got.source, got.data) == (f"tar:shard_00000{tar}.tar", data)
        assert _source_verdict(sub, tars, ref) == ("ok", data)
    with pytest.raises(MissingMedia, match="^not found in"):
        r.resolve("d.jpg")


def test_a_name_two_members_share_is_an_ambiguous_miss_naming_both(tmp_path: Path) -> None:
    sub = _subset(tmp_path)
    tars = (
        _tar(sub / "media" / "shard_000000.tar", [("cats/p.jpg", b"cat"), ("same/q.jpg", b"q0")]),
        _tar(sub / "media" / "shard_000001.tar", [("dogs/p.jpg", b"dog"), ("same/q.jpg", b"q1")]),
    )
    r = MediaResolver(str(sub), tars)
    # the full path still picks one member; the bare name p.jpg belongs to two
    assert r.resolve("cats/p.jpg").data == b"cat" and r.resolve("dogs/p.jpg").data == b"dog"
    with pytest.raises(MissingMedia) as info:
        r.resolve("p.jpg")
    text = str(info.value)
    assert text.startswith("ambiguous: p.jpg: 2 media tar members have this file name (")
    assert "shard_000000.tar:cats/p.jpg" in text and "shard_000001.tar:dogs/p.jpg" in text
    assert _source_verdict(sub, tars, "p.jpg") == (f"not_found: {text}", None)
    # one path in two tars: ambiguous by path (the bare name falls back to nothing)
    for ref in ("same/q.jpg", "q.jpg"):
        with pytest.raises(MissingMedia, match=r"^ambiguous: .*q\.jpg: 2 media tar members"):
            r.resolve(ref)


def test_a_member_appended_twice_to_one_tar_is_ambiguous_not_first_or_last_wins(tmp_path: Path) -> None:
    sub = _subset(tmp_path)
    tars = (
        _tar(
            sub / "media" / "shard_000000.tar", [("d/v.jpg", b"old"), ("ok.jpg", b"k"), ("d/v.jpg", b"new")]
        ),
    )
    r = MediaResolver(str(sub), tars)
    for ref in ("d/v.jpg", "v.jpg"):
        with pytest.raises(MissingMedia, match=r"^ambiguous: .*: 2 media tar members have this") as info:
            r.resolve(ref)
        assert str(info.value).count("shard_000000.tar:d/v.jpg@") == 2
    assert r.resolve("ok.jpg").data == b"k"


def test_names_match_in_nfc_whatever_form_is_on_disk(tmp_path: Path) -> None:
    assert NFC != NFD
    sub = _subset(tmp_path)
    (sub / f"dir_{NFD}").mkdir()
    (sub / f"dir_{NFD}" / NFD).write_bytes(b"loose nfd")  # a folder and a file stored in NFD (as macOS does)
    (sub / "media" / NFC).write_bytes(b"media nfc")
    assert NFD.encode() in os.listdir(str(sub / f"dir_{NFD}").encode())
    tars = (_tar(sub / "media" / "shard_000000.tar", [(f"t/{NFD}x", b"tar nfd")]),)
    r = MediaResolver(str(sub), tars)
    assert r.resolve(f"dir_{NFC}/{NFC}").data == b"loose nfd"  # NFC reference, NFD folder and file
    assert r.resolve(NFD).data == b"media nfc"  # NFD reference, NFC file
    assert r.resolve(f"t/{NFC}x").data == b"tar nfd"  # by path, NFD member
    assert r.resolve(f"{NFC}x").data == b"tar nfd"  # by file name
    assert _source_verdict(sub, tars, f"dir_{NFC}/{NFC}") == ("ok", b"loose nfd")
    # a user media root follows the same rule
    root = tmp_path / "root"
    root.mkdir()
    (root / NFD).write_bytes(b"root nfd")
    assert MediaResolver(str(sub), tars, (str(root),)).resolve(NFC).data == b"root nfd"


def test_two_names_alike_in_nfc_neither_exact_is_ambiguous(tmp_path: Path) -> None:
    sub = _subset(tmp_path)
    mixed = unicodedata.normalize("NFC", "café_") + unicodedata.normalize("NFD", "über.jpg")
    assert len({NFC, NFD, mixed}) == 3
    (sub / NFC).write_bytes(b"one")
    (sub / NFD).write_bytes(b"two")
    r = MediaResolver(str(sub))
    assert r.resolve(NFC).data == b"one" and r.resolve(NFD).data == b"two"  # the exact name wins
    with pytest.raises(MissingMedia, match=r"^ambiguous: .*2 names in s match it in Unicode NFC"):
        r.resolve(mixed)
