"""Bad and hostile input, built here (no downloaded data): every case ends as a reject with a readable reason,
in bounded time and memory, writes nothing outside the output folder, and leaves the other rows alone.

Each case is run at the level of the module that meets it first (``parse_batch``, ``MediaResolver``, the
archive readers through ``fetch_batch``, ``process_image``, ``probe_video``). Time and peak RSS of every case
are measured (peak RSS with ``/proc/self/clear_refs``, so it is the case's own peak) and kept in
:data:`RESULTS`; ``benchmarks/reliability_report.py`` prints them. Bounds are asserted only where they are a
behaviour guarantee (a bomb must not be inflated, a video must stop at its deadline), and generously.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import REAL_MEDIA, absurd_dimension_avi, all_frames, long_video, make_video
from PIL import Image

from vlmforge.schemas.recipes import Recipe, parse_recipe
from vlmforge.schemas.records import Record, Reject
from vlmforge.tasks.archives.tar_format import iter_tar
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.fetch.acquire import fetch_batch
from vlmforge.tasks.fetch.options import FetchContext, FetchKnobs
from vlmforge.tasks.fetch.release_media import MediaResolver, MissingMedia
from vlmforge.tasks.http.failures import FAILURE_CLASSES, FetchError
from vlmforge.tasks.media.image import IMAGE_REASONS, ImageResult, process_image
from vlmforge.tasks.media.video import VIDEO_REASONS, probe_video
from vlmforge.tasks.parse.jsonl_batch import parse_batch, parse_line
from vlmforge.tasks.storage import ContentStore

MB = 1024 * 1024


# ------------------------------------------------------------------------------------------ measurement


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        return True
    except OSError:
        return False


@dataclass
class CaseResult:
    name: str
    group: str
    expected: str
    reasons: list[str]
    seconds: float
    peak_mb: float  # peak RSS above the RSS at the start of the case
    rows_lost: int = 0
    crashed: str | None = None


RESULTS: list[CaseResult] = []


def measure(fn: Callable[[], list[str]]) -> tuple[list[str], float, float]:
    _reset_peak()
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    reasons = fn()
    seconds = time.perf_counter() - t0
    peak = max(_status_kb("VmHWM"), _status_kb("VmRSS"))
    return reasons, seconds, max(0.0, (peak - rss0) / 1024)


# ------------------------------------------------------------------------------------------------ cases

# build(tmp) -> run(); run() returns the reason of every hostile item and asserts the good ones unaffected.
Build = Callable[[Path], Callable[[], list[str]]]


@dataclass(frozen=True)
class Case:
    name: str
    group: str
    expect: str  # regex every reason must match (re.match)
    build: Build
    max_seconds: float | None = None  # asserted: a behaviour guarantee (bounded work), generous
    max_peak_mb: float | None = None
    needs_real: str | None = None  # a file of ../shared/testdata/real-media (skipped when absent)


CASES: list[Case] = []


def case(
    name: str,
    group: str,
    expect: str,
    *,
    max_seconds: float | None = None,
    max_peak_mb: float | None = None,
    needs_real: str | None = None,
) -> Callable[[Build], Build]:
    def deco(build: Build) -> Build:
        CASES.append(Case(name, group, expect, build, max_seconds, max_peak_mb, needs_real))
        return build

    return deco


# ---- JSONL ----------------------------------------------------------------------------------------------


def line(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def good(i: int) -> bytes:
    return line(
        {
            "id": f"good{i}",
            "messages": [{"role": "user", "content": [{"type": "image", "image": f"{i}.jpg"}, "q"]}],
        }
    )


Items = list[bytes] | Callable[[], list[bytes]]  # a callable: built when the case runs, not at import


def _items(items: Items) -> list[bytes]:
    return items() if callable(items) else items


def jsonl_case(bad_items: Items, *, trailing_newline: bool = True, **parse_kw: object) -> Build:
    """good, bad..., good: the bad lines are rejected, the good ones parse exactly as on their own."""

    def build(tmp: Path) -> Callable[[], list[str]]:
        bad = _items(bad_items)
        lines = [good(0), *bad, good(1)] if trailing_newline else [good(0), good(1), *bad]
        data = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
        good_at = {0: good(0), len(bad) + 1: good(1)} if trailing_newline else {0: good(0), 1: good(1)}

        def run() -> list[str]:
            items = parse_batch(data, 1, subset="hostile", **parse_kw)  # type: ignore[arg-type,unused-ignore]
            assert len(items) == len(lines), "every input line is accounted for"
            assert [it.line for it in items] == list(range(1, len(lines) + 1))
            for i, raw in good_at.items():
                assert items[i] == parse_line(raw, i + 1, subset="hostile"), "a good row was affected"
            bad_items = [it for i, it in enumerate(items) if i not in good_at]
            assert all(isinstance(it, Reject) for it in bad_items), bad_items
            return [it.reason for it in bad_items if isinstance(it, Reject)]

        return run

    return build


case("invalid UTF-8", "jsonl", r"invalid_utf8: byte \d+")(
    jsonl_case(lambda: [b'{"id":"x","messages":[{"role":"user","content":"caf\xe9"}]}', b"\xff\xfe{}"])
)
case("truncated last line", "jsonl", r"invalid_json: .+ \(col \d+\)")(
    jsonl_case(lambda: [b'{"id":"cut","messages":[{"role":"user","content":"hal'], trailing_newline=False)
)
case("NaN / Infinity", "jsonl", r"invalid_json: -?(NaN|Infinity) is not valid JSON")(
    jsonl_case(
        lambda: [
            b'{"id":"n","messages":[{"role":"user","content":"x"}],"score":NaN}',
            b'{"id":"i","messages":[{"role":"user","content":"x"}],"score":Infinity}',
            b'{"id":"m","messages":[{"role":"user","content":"x"}],"score":-Infinity}',
        ]
    )
)
case("deeply nested JSON (100k levels)", "jsonl", r"invalid_json: nested too deeply", max_seconds=10)(
    jsonl_case(lambda: [b'{"id":"deep","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", b"[" * 1_000_000])
)
case(
    "deeply nested part metadata (500 levels)", "jsonl", r"invalid_record: .*metadata nested deeper than \d+"
)(
    jsonl_case(
        lambda: [
            b'{"id":"m","messages":[{"role":"user","content":[{"type":"image","image":"a.jpg","metadata":{"m":'
            + b"[" * 500
            + b"]" * 500
            + b"}}]}]}"
        ]
    )
)
case("100 MB single line", "jsonl", r"line_too_long: \d+ bytes > \d+", max_seconds=30, max_peak_mb=250)(
    jsonl_case(lambda: [b'{"id":"big","messages":[{"role":"user","content":"' + b"a" * (100 * MB) + b'"}]}'])
)
case("missing fields", "jsonl", r"invalid_record: missing field (id|messages|messages\[0\]\.content)")(
    jsonl_case(
        lambda: [
            line({"messages": [{"role": "user", "content": "x"}]}),
            line({"id": "no-messages"}),
            line({"id": "no-content", "messages": [{"role": "user"}]}),
        ]
    )
)
case(
    "wrong types", "jsonl", r"(invalid_record: .*(must|expected|needs|holds inline bytes)|unsupported_part:)"
)(
    jsonl_case(
        lambda: [
            line([1, 2, 3]),
            line("just a string"),
            line({"id": True, "messages": [{"role": "user", "content": "x"}]}),
            line({"id": 1.5, "messages": [{"role": "user", "content": "x"}]}),
            line({"id": ["a"], "messages": [{"role": "user", "content": "x"}]}),
            line({"id": "t", "messages": "not a list"}),
            line({"id": "t", "messages": [{"role": 7, "content": "x"}]}),
            line({"id": "t", "messages": [{"role": "user", "content": 42}]}),
            line({"id": "t", "messages": [{"role": "user", "content": [{"type": "image", "image": 5}]}]}),
            line(
                {"id": "t", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}]}
            ),
            line(
                {
                    "id": "t",
                    "messages": [
                        {"role": "user", "content": [{"type": "image", "image": {"bytes": "AAAA"}}]}
                    ],
                }
            ),
        ]
    )
)
case(
    "unsafe references in records",
    "jsonl",
    r"unsafe_ref: .* \((absolute path|path escapes its folder|URL references need a media recipe|NUL byte)",
)(
    jsonl_case(
        lambda: [
            line(
                {"id": f"u{i}", "messages": [{"role": "user", "content": [{"type": "image", "image": ref}]}]}
            )
            for i, ref in enumerate(
                [
                    "/etc/passwd",
                    "../../etc/passwd",
                    "images/../../../etc/shadow",
                    "file:///etc/passwd",
                    "FILE://localhost/etc/passwd",
                    "C:\\Windows\\win.ini",
                    "\\\\server\\share\\x.jpg",
                    "..\\..\\secret.jpg",
                    "http://169.254.169.254/latest/meta-data/",
                    "a.jpg\x00.png",
                ]
            )
        ]
    )
)


@case("duplicate and dotted ids", "jsonl", r"duplicate_row: identical to line \d+")
def _duplicates(tmp: Path) -> Callable[[], list[str]]:
    sub = tmp / "release" / "dups"
    sub.mkdir(parents=True)
    answer = {"role": "assistant", "content": "ok"}  # a usable conversation (no_assistant_turn otherwise)
    rows = [
        line({"id": "a.b", "messages": [{"role": "user", "content": "one"}, answer]}),
        # same Energon key as a.b
        line({"id": "a_b", "messages": [{"role": "user", "content": "two"}, answer]}),
        # same id, other content
        line({"id": "a.b", "messages": [{"role": "user", "content": "three"}, answer]}),
        line({"id": "a.b", "messages": [{"role": "user", "content": "one"}, answer]}),  # identical to line 1
    ]
    (sub / "dups.jsonl").write_bytes(b"\n".join(rows) + b"\n")

    def run() -> list[str]:
        entry = catalog_release(str(tmp / "release"))[0]
        items = parse_batch(
            (sub / "dups.jsonl").read_bytes(),
            1,
            duplicates=entry.duplicates_in(1, 4),
            conflicts=entry.conflicts_in(1, 4),
            subset="dups",
        )
        assert len(items) == 4
        first, second, third, fourth = items
        assert isinstance(first, Record) and first.key is None
        keys = {"dups__a_b"}
        for rec in (second, third):  # kept, each under a distinct key that names its line
            assert isinstance(rec, Record) and rec.id_conflict_of == 1 and rec.key not in keys, rec
            keys.add(str(rec.key))
        assert isinstance(fourth, Reject)
        return [fourth.reason]

    return run


# ---- references -------------------------------------------------------------------------------------------


def _release_with_links(tmp: Path) -> tuple[Path, Path]:
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"OUTSIDE-SECRET")
    sub = tmp / "release" / "s"
    (sub / "media").mkdir(parents=True)
    (sub / "ok.jpg").write_bytes(b"inside ok")
    os.symlink(outside / "secret.txt", sub / "evil.jpg")
    os.symlink("/etc/passwd", sub / "media" / "passwd.jpg")
    os.symlink(sub / "ok.jpg", sub / "media" / "alias.jpg")  # a link that stays inside: followed
    os.symlink(outside, sub / "media" / "dir")  # a linked folder leading outside
    return sub, outside


@case(
    "unsafe references at the resolver",
    "refs",
    r"missing_media: unsafe reference \((absolute path|path escapes its folder|URL references need|NUL byte|"
    r"symlink in the release leads outside)",
)
def _resolver_refs(tmp: Path) -> Callable[[], list[str]]:
    sub, outside = _release_with_links(tmp)
    root = tmp / "media_root"
    root.mkdir()
    os.symlink(outside / "secret.txt", root / "user_link.jpg")  # the user's own root: followed

    def run() -> list[str]:
        r = MediaResolver(str(sub), (), (str(root),))
        reasons = []
        for ref in [
            "/etc/passwd",
            "../outside/secret.txt",
            "file:///etc/passwd",
            f"file://{outside}/secret.txt",
            "a\x00b",
            "evil.jpg",
            "passwd.jpg",
            "media/passwd.jpg",
            "dir/secret.txt",
        ]:
            with pytest.raises(MissingMedia) as info:
                r.resolve(ref)
            reasons.append(f"missing_media: {info.value}")  # as build_batch words it
        assert r.resolve("ok.jpg").data == b"inside ok"
        assert r.resolve("alias.jpg").data == b"inside ok"
        assert r.resolve("user_link.jpg").data == b"OUTSIDE-SECRET"  # media roots are the user's choice
        return reasons

    return run


@case(
    "unsafe references at fetch",
    "refs",
    r"(no_source: unsafe reference|unsafe_member: symlink in the release)",
)
def _fetch_refs(tmp: Path) -> Callable[[], list[str]]:
    sub, _ = _release_with_links(tmp)

    def run() -> list[str]:
        ctx = FetchContext(subset_path=str(sub))
        refs = ["/etc/passwd", "../../etc/passwd", "file:///etc/passwd", "evil.jpg", "passwd.jpg", "ok.jpg"]
        res = fetch_batch(refs, Recipe.default("s"), ContentStore(str(tmp / "out" / "store")), context=ctx)
        assert res.outcomes["ok.jpg"].ok
        assert res.stats.refs == len(refs) and res.stats.ok + res.stats.failed == len(refs)
        return [res.outcomes[r].reason() for r in refs if r != "ok.jpg"]

    return run


# ---- archives ------------------------------------------------------------------------------------------


def _tar_bytes(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as tf:  # type: ignore[call-overload]
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tf.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def _archive_recipe(url: str) -> Recipe:
    return parse_recipe(
        {
            "subset": "s",
            "license": "CC-BY-4.0",
            "sources": [{"kind": "archive", "allow_private": True, "url": url}],
        }
    )


@case(
    "tar-slip, absolute, symlink, hardlink and device members",
    "archives",
    r"unsafe_member: .+: (member path escapes|absolute member path|symlink member|hardlink member"
    r"|not a regular file)",
)
def _tar_slip(tmp: Path) -> Callable[[], list[str]]:
    dev = tarfile.TarInfo("dev.jpg")
    dev.type = tarfile.CHRTYPE
    data = _tar_bytes(
        [
            ("ok.jpg", b"fine"),
            ("../slip.jpg", b"evil"),
            ("a/../../slip2.jpg", b"evil"),
            ("/abs.jpg", b"evil"),
            _link("sym.jpg", "/etc/passwd", tarfile.SYMTYPE),
            _link("hard.jpg", "ok.jpg", tarfile.LNKTYPE),
            dev,
        ]
    )
    path = tmp / "slip.tar"
    path.write_bytes(data)

    def run() -> list[str]:
        members = list(iter_tar(io.BytesIO(data), None, max_bytes=MB, label="slip.tar"))
        assert [m.name for m in members if m.error is None] == ["ok.jpg"]
        reasons = [str(m.error) for m in members if m.error is not None]
        store = ContentStore(str(tmp / "out" / "store"))
        refs = ["ok.jpg", "abs.jpg", "sym.jpg", "hard.jpg", "dev.jpg"]
        res = fetch_batch(refs, _archive_recipe(str(path)), store)
        assert res.outcomes["ok.jpg"].ok
        reasons += [res.outcomes[r].reason() for r in refs[1:]]
        return reasons

    return run


@case(
    "zip-slip and symlink members",
    "archives",
    r"unsafe_member: .+: (member path escapes|absolute member path|symlink member)",
)
def _zip_slip(tmp: Path) -> Callable[[], list[str]]:
    path = tmp / "slip.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok.jpg", b"fine")
        z.writestr("/abs.jpg", b"evil")
        z.writestr("a/../dotdot.jpg", b"evil")
        z.writestr("x/../../up.jpg", b"evil")
        link = zipfile.ZipInfo("link.jpg")
        link.external_attr = 0o120777 << 16
        z.writestr(link, b"/etc/passwd")

    def run() -> list[str]:
        refs = ["ok.jpg", "abs.jpg", "dotdot.jpg", "link.jpg"]
        res = fetch_batch(refs, _archive_recipe(str(path)), ContentStore(str(tmp / "out" / "store")))
        assert res.outcomes["ok.jpg"].ok
        return [res.outcomes[r].reason() for r in refs[1:]]

    return run


def _deflated_zip(path: Path, name: str, payload_size: int, *, declared: int | None = None) -> None:
    """A zip of one deflated member of ``payload_size`` zero bytes; ``declared`` overrides the size the
    central directory and local header state (a lying bomb)."""
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z,
        z.open(name, "w", force_zip64=False) as f,
    ):
        zero = bytes(MB)
        for _ in range(payload_size // MB):
            f.write(zero)
    if declared is not None:
        data = bytearray(path.read_bytes())
        real = struct.pack("<I", payload_size)
        for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # uncompressed size fields
            at = data.find(sig)
            assert data[at + off : at + off + 4] == real
            data[at + off : at + off + 4] = struct.pack("<I", declared)
        crc = zlib.crc32(bytes(declared))
        for sig, off in ((b"PK\x03\x04", 14), (b"PK\x01\x02", 16)):
            at = data.find(sig)
            data[at + off : at + off + 4] = struct.pack("<I", crc)
        path.write_bytes(bytes(data))


@case(
    "zip bombs (declared and lying sizes)",
    "archives",
    r"(too_large: .+ exceed the cap|bad_archive: .+ inflates past)",
    max_peak_mb=120,
)
def _zip_bomb(tmp: Path) -> Callable[[], list[str]]:
    honest, liar = tmp / "honest.zip", tmp / "liar.zip"
    _deflated_zip(honest, "bomb.jpg", 256 * MB)  # ~250 KB on disk
    _deflated_zip(liar, "bomb.jpg", 256 * MB, declared=1000)  # claims 1000 bytes
    opts = FetchKnobs(max_bytes=16 * MB)

    def run() -> list[str]:
        store = ContentStore(str(tmp / "out" / "store"))
        a = fetch_batch(["bomb.jpg"], _archive_recipe(str(honest)), store, options=opts).outcomes["bomb.jpg"]
        b = fetch_batch(["bomb.jpg"], _archive_recipe(str(liar)), store, options=opts).outcomes["bomb.jpg"]
        assert not a.transient and not b.transient  # not retried as if the network had cut them
        return [a.reason(), b.reason()]

    return run


def _ext_header_bomb(size: int, kind: bytes) -> bytes:
    """A .tar.gz whose first header is a GNU long name / pax header declaring ``size`` bytes (all zeros,
    so ~1000:1 compressed), then a normal member."""

    def header(name: str, n: int, typ: bytes) -> bytes:
        info = tarfile.TarInfo(name)
        info.size, info.type = n, typ
        return info.tobuf(format=tarfile.GNU_FORMAT)[-512:] if typ == tarfile.REGTYPE else _raw_header(info)

    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(header("././@LongLink", size, kind))]
    zero = bytes(MB)
    left = size + (-size % 512)
    while left:
        k = min(left, MB)
        out.append(comp.compress(zero[:k]))
        left -= k
    out.append(comp.compress(_tar_bytes([("a.jpg", b"abc")])))
    out.append(comp.flush())
    return b"".join(out)


def _raw_header(info: tarfile.TarInfo) -> bytes:
    return info._create_header(info.get_info(), tarfile.GNU_FORMAT, "utf-8", "surrogateescape")  # type: ignore[attr-defined]


@case(
    "tar header bombs (200 MB long name / pax header in a 200 KB .tar.gz)",
    "archives",
    r"bad_archive: .*extended header of \d+ bytes",
    max_peak_mb=64,
)
def _tar_header_bomb(tmp: Path) -> Callable[[], list[str]]:
    paths = []
    for i, kind in enumerate((tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE)):
        p = tmp / f"bomb{i}.tar.gz"
        p.write_bytes(_ext_header_bomb(200 * MB, kind))
        paths.append(p)

    def run() -> list[str]:
        reasons = []
        for p in paths:
            with pytest.raises(FetchError) as info:
                list(iter_tar(io.BytesIO(p.read_bytes()), None, max_bytes=MB, label=p.name))
            reasons.append(str(info.value))
            o = fetch_batch(["a.jpg"], _archive_recipe(str(p)), ContentStore(str(tmp / "out" / "store")))
            reasons.append(o.outcomes["a.jpg"].reason())
        return reasons

    return run


@case(
    "tar.gz member bomb (128 MB of zeros, 128 KB compressed)",
    "archives",
    r"too_large: .+ exceed the cap",
    max_peak_mb=64,
)
def _tar_member_bomb(tmp: Path) -> Callable[[], list[str]]:
    size = 128 * MB
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    info = tarfile.TarInfo("bomb.jpg")
    info.size = size
    parts = [comp.compress(info.tobuf(format=tarfile.GNU_FORMAT))]
    zero = bytes(MB)
    for _ in range(size // MB):
        parts.append(comp.compress(zero))
    parts += [comp.compress(bytes(1024)), comp.flush()]
    path = tmp / "member_bomb.tar.gz"
    path.write_bytes(b"".join(parts))

    def run() -> list[str]:
        res = fetch_batch(
            ["bomb.jpg"],
            _archive_recipe(str(path)),
            ContentStore(str(tmp / "out" / "store")),
            options=FetchKnobs(max_bytes=16 * MB),
        )
        return [res.outcomes["bomb.jpg"].reason()]

    return run


@case(
    "corrupt and truncated release tars",
    "archives",
    r"missing_media: not found in media roots.*unreadable media tar\(s\): shard_000000\.tar: ",
)
def _bad_release_tar(tmp: Path) -> Callable[[], list[str]]:
    sub = tmp / "release" / "s"
    (sub / "media").mkdir(parents=True)
    (sub / "media" / "shard_000000.tar").write_bytes(b"<html>not a tar</html>" * 50)
    whole = _tar_bytes([("first.jpg", b"first"), ("second.jpg", b"x" * 5000)])
    (sub / "media" / "shard_000001.tar").write_bytes(whole[:1500] + b"\x07" * 512)  # garbage mid-archive
    tars = tuple(str(p) for p in sorted((sub / "media").glob("shard_*.tar")))

    def run() -> list[str]:
        r = MediaResolver(str(sub), tars)
        assert r.resolve("first.jpg").data == b"first"  # members before the damage stay available
        with pytest.raises(MissingMedia) as info:
            r.resolve("second.jpg")
        out = fetch_batch(
            ["first.jpg", "second.jpg"],
            Recipe.default("s"),
            ContentStore(str(tmp / "out" / "store")),
            context=FetchContext(str(sub), tars),
        )
        assert out.outcomes["first.jpg"].ok and out.outcomes["second.jpg"].status == "not_found"
        return [f"missing_media: {info.value}"]

    return run


# ---- images -----------------------------------------------------------------------------------------------


def target_size(h: int, w: int) -> tuple[int, int]:
    return max(28, round(h / 28) * 28), max(28, round(w / 28) * 28)


def _jpeg(w: int = 96, h: int = 64, **kw: object) -> bytes:
    buf = io.BytesIO()
    arr = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    Image.fromarray(arr).save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(w: int, h: int, *, extra: bytes = b"", idat: bytes | None = None, ctype: int = 0) -> bytes:
    if idat is None:
        idat = zlib.compress((b"\0" + b"\x80" * w * (3 if ctype == 2 else 1)) * h)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + extra + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def image_case(hostile: Items, **kw: object) -> Build:
    """good, hostile..., good through process_image: the hostile ones are rejected, the good ones kept."""

    def build(tmp: Path) -> Callable[[], list[str]]:
        ok = _jpeg()
        items = _items(hostile)

        def run() -> list[str]:
            def one(data: bytes) -> ImageResult:
                return process_image(data, target_size=target_size, max_pixels=1_000_000, **kw)  # type: ignore[arg-type,unused-ignore]

            before = one(ok)
            reasons = []
            for data in items:
                r = one(data)
                reasons.append(
                    f"{r.reason}: {r.detail}" if r.status != "ok" else f"ok: {','.join(r.notes) or 'kept'}"
                )
            assert one(ok) == before and before.status == "ok"
            return reasons

        return run

    return build


def _patch_sof(data: bytes, w: int, h: int) -> bytes:
    out = bytearray(data)
    at = out.find(b"\xff\xc0")
    out[at + 5 : at + 9] = struct.pack(">HH", h, w)
    return bytes(out)


case(
    "image decompression bombs (header claims)",
    "images",
    r"decompression_bomb: ",
    max_seconds=5,
    max_peak_mb=64,
)(
    image_case(
        lambda: [
            _png(100_000, 100_000, idat=zlib.compress(b"")),
            b"GIF89a"
            + struct.pack("<HH", 65535, 65535)
            + b"\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;",
            b"BM" + bytes(12) + struct.pack("<IiiHHIIiiII", 40, 50_000, 50_000, 1, 24, 0, 0, 0, 0, 0, 0),
            _patch_sof(_jpeg(64, 64), 60_000, 60_000),
        ]
    )
)
case(
    "PNG text / ICC chunk bombs (200 MB inflated)",
    "images",
    r"decode_error: .*MAX_TEXT_CHUNK",
    max_peak_mb=64,
)(
    image_case(
        lambda: [
            _png(64, 64, extra=_chunk(b"zTXt", b"k\0\0" + zlib.compress(bytes(200 * MB), 9))),
            _png(64, 64, extra=_chunk(b"iCCP", b"p\0\0" + zlib.compress(bytes(200 * MB), 9))),
        ]
    )
)
case(
    "PNG pixel data inflating 256 MB past its rows",
    "images",
    r"ok: ",  # decoders ignore bytes past the last row: kept/resized, but never inflated
    max_seconds=10,
    max_peak_mb=200,
)(
    image_case(
        lambda: [
            _png(64, 64, idat=zlib.compress((b"\0" + b"\x80" * 64) * 64 + bytes(256 * MB), 9)),
            _png(5000, 5000, idat=zlib.compress((b"\0" + b"\x80" * 5000) * 5000 + bytes(256 * MB), 9)),
        ]
    )
)


def _zip_blob() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("payload.sh", b"#!/bin/sh\nrm -rf /\n")
    return buf.getvalue()


def _truncations() -> list[bytes]:
    j, p = _jpeg(), _png(64, 64, ctype=2)
    return [j[: len(j) // 2], j[:200], p[: len(p) - 30]]


case("truncated images", "images", r"(truncated|decode_error): ")(image_case(_truncations()))
case(
    "polyglots and non-images",
    "images",
    r"((not_an_image|decode_error|truncated|zero_size): |ok: trailing_data_stripped:\d+)",
)(
    image_case(
        lambda: [
            b"GIF89a<html><script>alert(1)</script></html>",
            b"\xff\xd8\xff\xe0<!DOCTYPE html><html>error</html>",
            b"<!DOCTYPE html><html><body>429 Too Many Requests</body></html>",
            b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>',
            b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF",
            b"\x7fELF\x02\x01\x01" + bytes(64),
            b"PK\x03\x04" + bytes(40),
            b"",
            _jpeg() + _zip_blob(),  # JPEG + ZIP polyglot: the JPEG is kept, the ZIP cut off
        ]
    )
)


@case(
    "real-media bombs and broken files",
    "images",
    r"(decompression_bomb|truncated|decode_error): ",
    max_seconds=10,
    needs_real="decompression_bomb.ico",
)
def _real_images(tmp: Path) -> Callable[[], list[str]]:
    names = [
        "decompression_bomb.ico",
        "cross_scan_line_truncated.tga",
        "crash-0c7e0e8e11ce787078f00b5b0ca409a167f070e0.tif",
    ]
    datas = [(REAL_MEDIA / n).read_bytes() for n in names if (REAL_MEDIA / n).exists()]
    return image_case(datas, max_image_pixels=10_000_000)(tmp)


# ---- videos -----------------------------------------------------------------------------------------------


def video_case(
    hostile: Items, *, timeout_s: float = 5.0, choose: Callable[[int, float], list[int]] = all_frames
) -> Build:
    def build(tmp: Path) -> Callable[[], list[str]]:
        ok = make_video(frames=8)
        items = _items(hostile)

        def run() -> list[str]:
            before = probe_video(ok, choose_frames=all_frames)
            reasons = []
            for data in items:
                r = probe_video(data, choose_frames=choose, timeout_s=timeout_s)
                reasons.append(f"{r.reason}: {r.detail}")
            assert probe_video(ok, choose_frames=all_frames) == before and before.status == "ok"
            return reasons

        return run

    return build


case(
    "videos claiming absurd dimensions",
    "videos",
    r"(decompression_bomb: .*\d+x\d+|video_decode_error: .*Invalid data)",
    max_seconds=5,
    max_peak_mb=100,
)(video_case(lambda: [absurd_dimension_avi(12_000, 12_000), absurd_dimension_avi(65_000, 65_000)]))


@case("a video that decodes (nearly) forever", "videos", r"video_timeout: ", max_seconds=5)
def _forever(tmp: Path) -> Callable[[], list[str]]:
    endless = long_video(60)  # 1800 frames of noise: many seconds to decode in full
    return video_case([endless], timeout_s=0.3, choose=lambda n, fps: [n - 1])(tmp)


def _broken_videos() -> list[bytes]:
    v = make_video(frames=16)
    return [
        v[: len(v) // 3],
        v[: len(v) - 200],
        os.urandom(4096),
        _jpeg(),
        b"RIFF\x00\x00\x00\x00AVI LIST" + bytes(64),
    ]


case(
    "truncated videos and non-videos",
    "videos",
    r"(video_decode_error|not_a_video|no_video_stream): ",
    max_seconds=10,
)(video_case(_broken_videos()))


# ------------------------------------------------------------------------------------------------ runner


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Path]:
    """A tmp folder, with the process temp dir pointed inside it (checked empty afterwards)."""
    systmp = tmp_path / "systmp"
    systmp.mkdir()
    saved = tempfile.tempdir
    tempfile.tempdir = str(systmp)
    try:
        yield tmp_path
    finally:
        tempfile.tempdir = saved


def run_case(c: Case, tmp: Path) -> CaseResult:
    """Build, run and measure one case; the result is appended to :data:`RESULTS`."""
    run = c.build(tmp)
    before = _tree(tmp)
    try:
        reasons, seconds, peak = measure(run)
        crashed = None
    except AssertionError:
        raise
    except Exception as exc:  # a crash: recorded, then re-raised by the test
        RESULTS.append(
            CaseResult(c.name, c.group, c.expect, [], 0.0, 0.0, crashed=f"{type(exc).__name__}: {exc}")
        )
        raise
    written = {p for p in _tree(tmp) - before if not p.startswith(("out", "systmp"))}
    assert not written, f"written outside the output folder: {sorted(written)}"
    assert not any((tmp / "systmp").iterdir()), "temporary files left behind"
    result = CaseResult(c.name, c.group, c.expect, reasons, seconds, peak, crashed=crashed)
    RESULTS.append(result)
    return result


def _readable(reason: str) -> bool:
    return 8 <= len(reason) <= 1200 and reason.isprintable() and ":" in reason


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_hostile_input_is_rejected_with_a_reason(c: Case, sandbox: Path) -> None:
    if c.needs_real and not (REAL_MEDIA / c.needs_real).exists():
        pytest.skip(f"{REAL_MEDIA} is absent")
    result = run_case(c, sandbox)
    assert result.reasons, "the case produced no hostile item"
    for reason in result.reasons:
        assert re.match(c.expect, reason, re.DOTALL), f"{c.name}: unexpected reason {reason!r}"
        assert _readable(reason), f"{c.name}: unreadable reason {reason!r}"
        code = reason.split(":", 1)[0]
        assert code in _KNOWN_CODES, f"{c.name}: unknown code {code!r} in {reason!r}"
    if c.max_seconds is not None:
        assert result.seconds < c.max_seconds, f"{c.name}: {result.seconds:.1f} s"
    if c.max_peak_mb is not None and _reset_peak():
        assert result.peak_mb < c.max_peak_mb, f"{c.name}: peak {result.peak_mb:.0f} MB"


_KNOWN_CODES = {
    *FAILURE_CLASSES,
    *IMAGE_REASONS,
    *VIDEO_REASONS,
    "ok",
    "missing_media",
    "empty_line",
    "invalid_utf8",
    "invalid_json",
    "invalid_record",
    "unsupported_part",
    "unsafe_ref",
    "placeholder_mismatch",
    "duplicate_row",
    "line_too_long",
}


def test_every_case_group_is_covered() -> None:
    groups = {c.group for c in CASES}
    assert groups == {"jsonl", "refs", "archives", "images", "videos"}
    assert len(CASES) >= 25


def cleanup(tmp: Path) -> None:  # used by the report script
    shutil.rmtree(tmp, ignore_errors=True)
