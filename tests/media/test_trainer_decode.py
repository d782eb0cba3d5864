"""One definition of "decodes as the trainer decodes it", orientation applied exactly once, and the reasons
for formats vlmforge does not take. Every file is built here, at test time."""

from __future__ import annotations

import io
import json
import struct
import tarfile
import zlib
from pathlib import Path

import av
import numpy as np
import pytest
from conftest import REAL_MEDIA, make_video
from PIL import Image, ImageOps

from vlmforge.tasks.media.formats import ACCEPTED_IMAGE_FORMATS
from vlmforge.tasks.media.image import IMAGE_REASONS, ImageResult, process_image
from vlmforge.tasks.media.trainer_decode import image_problem, part_problem, video_problem
from vlmforge.tasks.media.video import VIDEO_REASONS, display_rotation, probe_video
from vlmforge.tasks.validate import media_problems


def run(data: bytes, **kw: object) -> ImageResult:
    args: dict[str, object] = {"target_size": lambda h, w: (h, w), "max_pixels": 10**8}
    args.update(kw)
    return process_image(data, **args)  # type: ignore[arg-type]


def trainer_ok(data: bytes) -> bool:
    """What a trainer's loader does with an image part: Pillow opens it and reads every pixel."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
        return True
    except Exception:
        return False


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def encoded(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def with_chunk(png: bytes, extra: bytes, *, after_idat: bool) -> bytes:
    """``extra`` inserted before the first IDAT, or just before IEND."""
    at = png.index(b"IEND") - 4 if after_idat else png.index(b"IDAT") - 4
    return png[:at] + extra + png[at:]


# ---- kept originals: the trainer's verdict --------------------------------------------------------------


def test_png_whose_last_chunk_is_truncated_is_rejected() -> None:
    # a text chunk after the image data, cut short: the chunk walk stops there, Pillow's load() raises
    png = with_chunk(
        encoded(photo(40, 30), "PNG"), chunk(b"tEXt", b"Comment\x00" + b"x" * 400), after_idat=True
    )
    cut = png[: png.index(b"tEXt") + 100]
    assert not trainer_ok(cut)
    r = run(cut)
    assert (r.status, r.reason) == ("rejected", "truncated"), r
    assert image_problem(cut) is not None and image_problem(cut).reason == "truncated"  # type: ignore[union-attr]


@pytest.mark.parametrize("trailing", [b"tEXt", b"zTXt", b"iTXt", b"eXIf", b"prIv"])
def test_kept_png_verdict_equals_the_trainers_at_every_cut(trailing: bytes) -> None:
    bodies = {
        b"tEXt": b"Comment\x00" + b"y" * 200,
        b"zTXt": b"Comment\x00\x00" + zlib.compress(b"z" * 2000),
        b"iTXt": b"Comment\x00\x00\x00\x00\x00" + b"w" * 200,
        b"eXIf": Image.Exif().tobytes()[6:] + bytes(64),
        b"prIv": bytes(range(200)),
    }
    png = with_chunk(
        encoded(photo(24, 16, seed=2), "PNG"), chunk(trailing, bodies[trailing]), after_idat=True
    )
    assert run(png).kept_original
    start = png.index(b"IDAT") - 4
    disagree = [
        cut for cut in range(start, len(png)) if (run(png[:cut]).status == "ok") != trainer_ok(png[:cut])
    ]
    assert disagree == []
    assert sum(not trainer_ok(png[:cut]) for cut in range(start, len(png))) > 20  # the cuts do break it


def test_kept_jpeg_cheap_verification_equals_the_trainers_verdict() -> None:
    """The one cheap path left (kept JPEGs decoded with DCT scaling at 1/8) gives a full decode's verdict on
    cuts and bit flips of baseline, progressive, 4:4:4 and restart-marker JPEGs."""
    rng = np.random.default_rng(5)
    broken = 0
    for seed, kw in enumerate([{}, {"progressive": True}, {"subsampling": 0}, {"restart_marker_blocks": 2}]):
        base = np.asarray(photo(20, 15, seed)).repeat(8, 0).repeat(8, 1)
        clean = encoded(Image.fromarray(base), "JPEG", quality=90, **kw)
        assert run(clean).kept_original
        cases = [clean[:cut] for cut in rng.integers(200, len(clean), 25)]
        for pos in rng.integers(200, len(clean) - 2, 40):
            damaged = bytearray(clean)
            damaged[pos] ^= 1 << int(rng.integers(0, 8))
            cases.append(bytes(damaged))
        for case in cases:
            ok = trainer_ok(case)
            broken += not ok
            assert (run(case).status == "ok") == ok, (kw, len(case))
    assert broken > 40


# ---- formats vlmforge does not accept -------------------------------------------------------------------


def _xpm() -> bytes:
    return b'/* XPM */\nstatic char *x[] = {\n"2 2 1 1",\n"a c #ff0000",\n"aa",\n"aa"\n};\n'


def _fits() -> bytes:
    cards = [
        "SIMPLE  =                    T",
        "BITPIX  =                    8",
        "NAXIS   =                    2",
    ]
    cards += ["NAXIS1  =                    2", "NAXIS2  =                    2", "END"]
    header = "".join(card.ljust(80) for card in cards).ljust(2880).encode()
    return header + bytes(4).ljust(2880, b"\x00")


def _cur() -> bytes:
    ico = bytearray(encoded(photo(16, 16), "ICO", sizes=[(16, 16)], bitmap_format="bmp"))
    ico[2:4] = struct.pack("<H", 2)  # resource type 2: a cursor
    return bytes(ico)


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("XPM", _xpm),
        ("FITS", _fits),
        ("CUR", _cur),
        ("BLP", lambda: encoded(photo(16, 16).quantize(), "BLP")),
        ("EPS", lambda: encoded(photo(16, 16), "EPS")),
    ],
)
def test_formats_pillow_reads_but_vlmforge_does_not_are_unsupported(name: str, make: object) -> None:
    data = make()  # type: ignore[operator]
    assert name not in ACCEPTED_IMAGE_FORMATS
    r = run(data)
    assert (r.status, r.reason, r.detail) == ("rejected", "unsupported_format", name), r
    assert r.reason in IMAGE_REASONS
    # the accepted list can be widened per call (EPS stays out: it would run Ghostscript)
    if name in ("XPM", "BLP"):
        assert run(data, accepted_formats=(*ACCEPTED_IMAGE_FORMATS, name)).status == "ok"


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + bytes(64), "HEIF"),
        (b"\xff\x0a\xfa\x7f" + bytes(64), "JXL"),
        (b"\x00\x00\x00\x0cJXL \r\n\x87\n" + bytes(64), "JXL"),
    ],
)
def test_heif_and_jxl_without_a_plugin_are_unsupported_not_broken(data: bytes, fmt: str) -> None:
    if fmt in Image.OPEN:
        pytest.skip(f"a {fmt} plugin is installed here")
    r = run(data)
    assert (r.status, r.reason) == ("rejected", "unsupported_format"), r
    assert (r.detail or "").startswith(fmt)


def test_plain_garbage_is_still_not_an_image() -> None:
    assert run(b"<!DOCTYPE html><html>429</html>").reason == "not_an_image"


def _swf() -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format="swf") as container:
        stream = container.add_stream("flv", rate=8)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"  # type: ignore[union-attr]
        for k in range(8):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), 10 * k, np.uint8), format="rgb24")
            for packet in stream.encode(frame):  # type: ignore[union-attr]
                container.mux(packet)
        for packet in stream.encode():  # type: ignore[union-attr]
            container.mux(packet)
    return buf.getvalue()


def test_flash_is_not_a_video() -> None:
    data = _swf()
    assert data[:3] == b"FWS"
    with av.open(io.BytesIO(data)) as container:  # PyAV opens and decodes it...
        assert container.format.name == "swf" and next(container.decode(video=0)) is not None
    r = probe_video(data, choose_frames=lambda n, fps: [0, n - 1])  # ...but it is no video a trainer loads
    assert (r.status, r.reason) == ("rejected", "unsupported_format"), r
    assert (r.detail or "").startswith("swf") and r.reason in VIDEO_REASONS
    assert video_problem(data, [0]) is not None


def test_animated_image_keeps_its_first_frame_and_says_how_many() -> None:
    frames = [Image.new("RGB", (20, 10), (40 * k, 0, 0)) for k in range(5)]
    gif = io.BytesIO()
    frames[0].save(gif, "GIF", save_all=True, append_images=frames[1:])
    r = run(gif.getvalue())
    assert r.status == "ok" and r.n_frames == 5
    assert run(encoded(photo(20, 10), "PNG")).n_frames == 1


# ---- orientation: applied exactly once, as ImageOps.exif_transpose does ---------------------------------


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()  # b"Exif\0\0" + TIFF block


def _xmp(orientation: int, element: bool = False) -> bytes:
    attr = (
        f"<tiff:Orientation>{orientation}</tiff:Orientation>"
        if element
        else f'tiff:Orientation="{orientation}"'
    )
    desc = (
        f'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/">{attr}</rdf:Description>'
        if element
        else f'<rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" {attr}/>'
    )
    return (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#">'
        + desc.encode()
        + b"</rdf:RDF></x:xmpmeta>"
    )


def _png(o: int, where: str) -> bytes:
    base = encoded(photo(24, 14, seed=o), "PNG")
    raw_profile = _exif(o)[6:].hex()
    extra = {
        "exif_before": chunk(b"eXIf", _exif(o)[6:]),
        "exif_after": chunk(b"eXIf", _exif(o)[6:]),
        "xmp_before": chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00" + _xmp(o)),
        "xmp_after": chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00" + _xmp(o, element=True)),
        "imagemagick": chunk(
            b"zTXt",
            b"Raw profile type exif\x00\x00"
            + zlib.compress(f"\nexif\n{len(raw_profile) // 2:8}\n{raw_profile}\n".encode()),
        ),
    }[where]
    return with_chunk(base, extra, after_idat=where.endswith("after"))


def _jpeg_with_app1(payload: bytes) -> bytes:
    jpeg = encoded(photo(24, 14, seed=3), "JPEG", quality=95)
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]


ORIENTED: dict[str, object] = {
    "jpeg_exif": lambda o: encoded(photo(24, 14, seed=o), "JPEG", quality=95, exif=_exif(o)),
    "jpeg_xmp": lambda o: _jpeg_with_app1(b"http://ns.adobe.com/xap/1.0/\x00" + _xmp(o)),
    "webp_exif": lambda o: encoded(photo(24, 14, seed=o), "WEBP", lossless=True, exif=_exif(o)),
    "webp_xmp": lambda o: encoded(photo(24, 14, seed=o), "WEBP", lossless=True, xmp=_xmp(o)),
    "tiff_tag": lambda o: encoded(photo(24, 14, seed=o), "TIFF", exif=_exif(o)),
    "tiff_tag_deflate": lambda o: encoded(
        photo(24, 14, seed=o), "TIFF", exif=_exif(o), compression="tiff_adobe_deflate"
    ),
    **{
        f"png_{where}": (lambda w: lambda o: _png(o, w))(where)
        for where in ("exif_before", "exif_after", "xmp_before", "xmp_after", "imagemagick")
    },
}


@pytest.mark.parametrize("orientation", [2, 3, 5, 6, 8])
@pytest.mark.parametrize("kind", sorted(ORIENTED))
def test_orientation_matches_pillows_exif_transpose_pixel_for_pixel(kind: str, orientation: int) -> None:
    data = ORIENTED[kind](orientation)  # type: ignore[operator]
    with Image.open(io.BytesIO(data)) as original:
        reference = np.asarray(ImageOps.exif_transpose(original).convert("RGB"))
    assert reference.shape[:2] == ((24, 14) if orientation >= 5 else (14, 24))  # the file does say so
    r = run(data, image_format="png")
    assert r.status == "ok", r
    assert (r.width, r.height) == (r.out_width, r.out_height) == (reference.shape[1], reference.shape[0])
    with Image.open(io.BytesIO(r.out_bytes or b"")) as out:
        got = np.asarray(out.convert("RGB"))
    np.testing.assert_array_equal(got, reference)


@pytest.mark.parametrize("kind", ["jpeg_exif", "png_xmp_before", "png_imagemagick", "tiff_tag"])
def test_upright_file_is_left_as_is(kind: str) -> None:
    data = ORIENTED[kind](1)  # type: ignore[operator]
    r = run(data, image_format="png")
    assert r.status == "ok" and (r.width, r.height) == (24, 14)
    assert not any(note.startswith("exif_orientation") for note in r.notes)


# ---- rotated videos: upright for the trainer in every mode ---------------------------------------------


def _halves_video(ccw: float | None) -> bytes:
    """H.264 MP4, 64 wide x 32 high as stored: left half red, right half blue."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=8)
        stream.width, stream.height, stream.pix_fmt = 64, 32, "yuv420p"  # type: ignore[union-attr]
        if ccw is not None:
            stream.set_display_rotation(ccw)  # type: ignore[union-attr]
        arr = np.zeros((32, 64, 3), np.uint8)
        arr[:, :32] = (220, 20, 20)
        arr[:, 32:] = (20, 20, 220)
        for _ in range(4):
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):  # type: ignore[union-attr]
                container.mux(packet)
        for packet in stream.encode():  # type: ignore[union-attr]
            container.mux(packet)
    return buf.getvalue()


def _red_side(frame: np.ndarray) -> str:
    """Where the red half is in an upright (H, W, 3) frame."""
    h, w = frame.shape[:2]
    halves = {
        "left": frame[:, : w // 2],
        "right": frame[:, w // 2 :],
        "top": frame[: h // 2],
        "bottom": frame[h // 2 :],
    }
    return max(halves, key=lambda side: float(halves[side][..., 0].mean() - halves[side][..., 2].mean()))


# clockwise rotation to display -> where the stored left (red) half is shown
_RED_SHOWN = {0: "left", 90: "top", 180: "right", 270: "bottom"}


@pytest.mark.parametrize(("ccw", "rotation"), [(None, 0), (-90.0, 90), (180.0, 180), (90.0, 270)])
def test_kept_video_frames_reach_the_trainer_upright(ccw: float | None, rotation: int) -> None:
    pytest.importorskip("megatron.energon")
    from vlmforge.energon import decode_video_frames

    data = _halves_video(ccw)
    assert display_rotation(data) == rotation
    probed = probe_video(data, choose_frames=lambda n, fps: [0, 2])
    assert probed.status == "ok" and probed.rotation == rotation
    frames = decode_video_frames(data, {"frame_indices": [0, 2]})  # what the crude cooker hands the trainer
    t, c, h, w = tuple(frames.shape)
    assert (t, c) == (2, 3) and (w, h) == (probed.width, probed.height)  # the manifest's size
    assert (w, h) == ((32, 64) if rotation in (90, 270) else (64, 32))
    for frame in frames:
        assert _red_side(frame.permute(1, 2, 0).numpy()) == _RED_SHOWN[rotation]


@pytest.mark.skipif(
    not (REAL_MEDIA / "video_270.mov").is_file(), reason=f"real rotated videos not at {REAL_MEDIA}"
)
@pytest.mark.parametrize(("name", "rotation"), [("video_180.mov", 180), ("video_270.mov", 270)])
def test_real_rotated_videos_decode_upright_at_the_recorded_size(name: str, rotation: int) -> None:
    pytest.importorskip("megatron.energon")
    from vlmforge.energon import decode_video_frames

    data = (REAL_MEDIA / name).read_bytes()
    probed = probe_video(data, choose_frames=lambda n, fps: [0, 1])
    frames = decode_video_frames(data, {"frame_indices": [0, 1]})
    assert probed.rotation == rotation and display_rotation(data) == rotation
    assert (frames.shape[3], frames.shape[2]) == (probed.width, probed.height)


# ---- the read-back and validate use the same definition -------------------------------------------------


def _tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_read_back_decodes_every_media_part_as_the_trainer(tmp_path: Path) -> None:
    good_png = encoded(photo(20, 10), "PNG")
    bad_png = with_chunk(good_png, chunk(b"tEXt", b"k\x00" + b"v" * 300), after_idat=True)[
        : len(good_png) + 60
    ]
    video = make_video(frames=8)
    record = {"messages": [{"content": [{"type": "video", "part": "1.mp4", "frame_indices": [0, 7]}]}]}
    beyond = {"messages": [{"content": [{"type": "video", "part": "0.mp4", "frame_indices": [0, 99]}]}]}
    _tar(
        tmp_path / "shard_000000.tar",
        {
            "a.json": json.dumps(record).encode(),
            "a.0.png": good_png,
            "a.1.mp4": video,
            "b.json": b"{}",
            "b.0.png": bad_png,
            "b.1.mp4": _swf(),
            "c.json": json.dumps(beyond).encode(),
            "c.0.mp4": video,
            "d.json": b"{}",
            "d.0.png": bad_png,  # not among the keys read
        },
    )
    problems = media_problems(tmp_path, ["shard_000000.tar"], {"a", "b", "c"})
    assert [p.split(":")[0] for p in problems] == ["b.0.png", "b.1.mp4", "c.0.mp4"], problems
    assert problems[0].startswith("b.0.png: truncated") and problems[1].startswith(
        "b.1.mp4: unsupported_format"
    )
    assert problems[2].startswith("c.0.mp4: frame_selection")
    assert part_problem("0.png", good_png) is None and part_problem("x.json", b"not media") is None


def test_readme_lists_the_accepted_image_formats() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    listed = readme.split("<!-- accepted-images -->", 1)[1].split("<!-- /accepted-images -->", 1)[0]
    assert [name.strip() for name in listed.split(",")] == list(ACCEPTED_IMAGE_FORMATS)
