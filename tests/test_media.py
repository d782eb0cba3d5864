"""Tests for vlmforge.tasks.media: image verify/normalise and video probing."""

from __future__ import annotations

import io
import json
import math
import os
import struct
import subprocess
import sys
import time
import wave
import zlib
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image, ImageOps

from vlmforge.tasks.media import IMAGE_REASONS, VIDEO_REASONS, ImageResult, probe_video, process_image

# --------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------

FACTOR = 28
MAX_PIXELS = 1280 * FACTOR * FACTOR  # ~1.0 MP, Qwen2-VL style


def smart_resize(height: int, width: int) -> tuple[int, int]:
    """Qwen2-VL style factor-aligned resize (what the pipeline passes as ``target_size``)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(FACTOR, round(height / FACTOR) * FACTOR)
    w_bar = max(FACTOR, round(width / FACTOR) * FACTOR)
    if h_bar * w_bar > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h_bar = math.floor(height / beta / FACTOR) * FACTOR
        w_bar = math.floor(width / beta / FACTOR) * FACTOR
    return h_bar, w_bar


def run(data: bytes, **kw: object) -> ImageResult:
    kw.setdefault("target_size", smart_resize)
    kw.setdefault("max_pixels", MAX_PIXELS)
    return process_image(data, **kw)


def encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """A smooth gradient with some texture: compresses like a photo, decodes deterministically."""
    rng = np.random.default_rng(seed)
    arr = np.empty((height, width, 3), np.uint8)
    arr[..., 0] = np.linspace(0, 255, width, dtype=np.uint8)[None, :]
    arr[..., 1] = np.linspace(255, 0, height, dtype=np.uint8)[:, None]
    arr[..., 2] = rng.integers(0, 64, (height, width), dtype=np.uint8)
    return Image.fromarray(arr, "RGB")


def decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def png_with_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` but that carries ~no pixel data."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def assert_ok(r: ImageResult) -> None:
    assert r.status == "ok", (r.reason, r.detail)
    assert r.reason is None
    assert r.out_bytes is not None


def assert_rejected(r: ImageResult, reason: str) -> None:
    assert r.status == "rejected", r
    assert r.reason == reason, (r.reason, r.detail)
    assert r.reason in IMAGE_REASONS
    assert r.out_bytes is None and r.out_ext is None and not r.kept_original


# --------------------------------------------------------------------------------------------------------
# images: keep / re-encode
# --------------------------------------------------------------------------------------------------------


def test_plain_jpeg_within_limits_is_kept_byte_identical() -> None:
    data = encode(photo(640, 480), "JPEG", quality=90)
    r = run(data)
    assert_ok(r)
    assert r.kept_original and r.out_bytes is data
    assert (r.format, r.mode, r.width, r.height) == ("JPEG", "RGB", 640, 480)
    assert (r.out_width, r.out_height, r.out_ext) == (640, 480, "jpg")
    assert r.notes == ()


@pytest.mark.parametrize(("fmt", "ext"), [("PNG", "png"), ("WEBP", "webp")])
def test_png_and_webp_within_limits_are_kept(fmt: str, ext: str) -> None:
    data = encode(photo(200, 100).convert("L") if fmt == "PNG" else photo(200, 100), fmt)
    r = run(data)
    assert_ok(r)
    assert r.kept_original and r.out_bytes == data and r.out_ext == ext


def test_explicit_format_different_from_source_reencodes() -> None:
    data = encode(photo(120, 80), "JPEG")
    r = run(data, image_format="png")
    assert_ok(r)
    assert not r.kept_original and r.out_ext == "png"
    out = decode(r.out_bytes or b"")
    assert out.format == "PNG" and out.size == (120, 80)
    same = run(data, image_format="jpeg")
    assert same.kept_original and same.out_bytes == data


def test_oversized_jpeg_is_resized_to_exactly_target_size() -> None:
    data = encode(photo(3000, 2000), "JPEG", quality=85)
    r = run(data)
    assert_ok(r)
    t_h, t_w = smart_resize(2000, 3000)
    assert (r.width, r.height) == (3000, 2000)
    assert (r.out_width, r.out_height) == (t_w, t_h)
    assert "resized" in r.notes and not r.kept_original and r.out_ext == "jpg"
    out = decode(r.out_bytes or b"")
    assert out.size == (t_w, t_h) and out.format == "JPEG"
    # colour content survives the DCT-scaled decode + LANCZOS: left edge red-ish, right edge bright red
    arr = np.asarray(out).astype(int)
    assert arr[:, -5:, 0].mean() > 200 and arr[:, :5, 0].mean() < 60


def test_target_size_receives_height_then_width() -> None:
    calls: list[tuple[int, int]] = []

    def target(h: int, w: int) -> tuple[int, int]:
        calls.append((h, w))
        return 56, 112  # (H, W)

    r = run(encode(photo(400, 200), "PNG"), target_size=target, max_pixels=10_000)
    assert_ok(r)
    assert calls == [(200, 400)]
    assert (r.out_width, r.out_height) == (112, 56)


def test_png_with_alpha_is_composited_on_white() -> None:
    arr = np.zeros((40, 60, 4), np.uint8)
    arr[:, :30] = (0, 0, 255, 255)  # opaque blue
    arr[:, 30:] = (0, 0, 0, 0)  # fully transparent black
    arr[:20, 30:] = (0, 0, 0, 128)  # half-transparent black
    r = run(encode(Image.fromarray(arr, "RGBA"), "PNG"))
    assert_ok(r)
    assert not r.kept_original and r.out_ext == "png" and r.mode == "RGBA"
    assert "alpha_composited_on_white" in r.notes
    out = decode(r.out_bytes or b"")
    assert out.mode == "RGB"
    assert out.getpixel((10, 10)) == (0, 0, 255)
    assert out.getpixel((50, 30)) == (255, 255, 255)  # transparent -> white, not black
    assert all(abs(c - 127) <= 2 for c in out.getpixel((50, 5)))  # type: ignore[union-attr]


def test_palette_png_with_transparency_composited() -> None:
    img = Image.new("P", (16, 16), 0)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    img.paste(1, (0, 0, 8, 16))
    r = run(encode(img, "PNG", transparency=0))
    assert_ok(r)
    assert "alpha_composited_on_white" in r.notes
    out = decode(r.out_bytes or b"")
    assert out.getpixel((2, 2)) == (255, 0, 0) and out.getpixel((12, 2)) == (255, 255, 255)


def test_cmyk_jpeg_converted_to_rgb() -> None:
    data = encode(Image.new("CMYK", (64, 48), (0, 255, 255, 0)), "JPEG", quality=95)
    r = run(data)
    assert_ok(r)
    assert r.mode == "CMYK" and not r.kept_original and r.out_ext == "jpg"
    out = decode(r.out_bytes or b"")
    assert out.mode == "RGB" and out.size == (64, 48)
    red, green, blue = out.getpixel((32, 24))  # type: ignore[misc]
    assert red > 220 and green < 40 and blue < 40


def test_icc_profile_and_exif_not_carried_over() -> None:
    from PIL import ImageCms

    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    exif = Image.Exif()
    exif[0x0112] = 3  # orientation forces a re-encode
    r = run(encode(photo(64, 64), "JPEG", icc_profile=icc, exif=exif.tobytes()))
    assert_ok(r)
    out = decode(r.out_bytes or b"")
    assert "icc_profile" not in out.info and "exif" not in out.info


def test_sixteen_bit_grayscale_is_scaled_not_clipped() -> None:
    arr = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (16, 1))
    r = run(encode(Image.fromarray(arr), "PNG"))
    assert_ok(r)
    assert r.mode is not None and r.mode.startswith("I") and not r.kept_original
    out = np.asarray(decode(r.out_bytes or b"").convert("L")).astype(int)
    assert out[:, 0].max() <= 2 and out[:, -1].min() >= 250 and 110 < out[:, 32].mean() < 145


def test_exif_orientation_6_displayed_size_swapped_and_baked_in() -> None:
    arr = np.zeros((40, 80, 3), np.uint8)  # stored 80 wide x 40 high
    arr[:, :40] = (255, 0, 0)  # left half red
    arr[:, 40:] = (0, 0, 255)  # right half blue
    exif = Image.Exif()
    exif[0x0112] = 6
    src = encode(Image.fromarray(arr), "JPEG", quality=95, exif=exif.tobytes())
    r = run(src)
    assert_ok(r)
    assert (r.width, r.height) == (40, 80) and (r.out_width, r.out_height) == (40, 80)
    assert not r.kept_original and "exif_orientation_6_applied" in r.notes
    out = decode(r.out_bytes or b"")
    assert out.size == (40, 80)
    assert out.getexif().get(0x0112) is None  # orientation baked in, tag gone
    expected = np.asarray(ImageOps.exif_transpose(decode(src))).astype(int)
    assert np.abs(np.asarray(out).astype(int) - expected).mean() < 3
    # rotated 90 deg clockwise: the stored left (red) half is now on top
    assert out.getpixel((20, 10))[0] > 200 and out.getpixel((20, 70))[2] > 200  # type: ignore[index]


def half(h: int, w: int) -> tuple[int, int]:
    return h // 2, w // 2


def test_reencode_is_deterministic() -> None:
    exif = Image.Exif()
    exif[0x0112] = 8
    exif[0x0132] = "2024:01:01 00:00:00"
    sources = [
        encode(photo(300, 460), "JPEG", exif=exif.tobytes()),
        encode(photo(460, 300).convert("RGBA"), "PNG"),
        encode(photo(460, 300), "WEBP", quality=80),
    ]
    for src in sources:
        first, second = (
            run(src, target_size=half, max_pixels=50_000),
            run(src, target_size=half, max_pixels=50_000),
        )
        assert_ok(first)
        assert not first.kept_original and "resized" in first.notes
        assert first.out_bytes == second.out_bytes
        assert first == second


def test_keep_format_rules_for_reencodes() -> None:
    big = photo(400, 300)

    def out_ext(data: bytes, **kw: object) -> str | None:
        return run(data, target_size=half, max_pixels=50_000, **kw).out_ext

    assert out_ext(encode(big, "WEBP")) == "webp"
    assert out_ext(encode(big, "PNG")) == "png"
    assert out_ext(encode(big, "JPEG")) == "jpg"
    assert out_ext(encode(big, "TIFF")) == "jpg"
    assert out_ext(encode(big.convert("RGBA"), "TIFF")) == "png"
    assert out_ext(encode(big.convert("P"), "GIF")) == "png"
    assert out_ext(encode(big, "TIFF"), image_format="webp") == "webp"
    assert out_ext(encode(big, "PNG"), image_format="jpeg") == "jpg"


def test_tiny_image_is_ok() -> None:
    r = run(encode(Image.new("RGB", (1, 1), (9, 9, 9)), "PNG"))
    assert_ok(r)
    assert r.kept_original and (r.width, r.height) == (1, 1)


# --------------------------------------------------------------------------------------------------------
# images: rejects
# --------------------------------------------------------------------------------------------------------


def test_zero_size() -> None:
    assert_rejected(run(b""), "zero_size")


def test_html_error_page_is_not_an_image() -> None:
    html = b"<!DOCTYPE html><html><head><title>404 Not Found</title></head><body>nope</body></html>\n"
    r = run(html)
    assert_rejected(r, "not_an_image")
    assert r.detail and "html" in r.detail.lower()


def test_random_bytes_not_an_image() -> None:
    assert_rejected(run(np.random.default_rng(1).bytes(4096)), "not_an_image")


def test_truncated_jpeg() -> None:
    data = encode(photo(512, 384, seed=3), "JPEG", quality=90)
    r = run(data[: int(len(data) * 0.6)])
    assert_rejected(r, "truncated")
    assert (r.width, r.height, r.format) == (512, 384, "JPEG")


def test_truncated_png() -> None:
    data = encode(photo(256, 256, seed=4), "PNG")
    assert_rejected(run(data[: len(data) // 2]), "truncated")


def test_corrupt_png_data_rejected() -> None:
    data = bytearray(encode(photo(64, 64), "PNG"))
    idat = data.index(b"IDAT")
    data[idat + 4 : idat + 40] = bytes(range(36))  # garbage zlib stream
    r = run(bytes(data))  # PNG within limits would otherwise be kept: the full decode must catch this
    assert_rejected(r, "truncated")  # zlib: "broken data stream"
    assert (r.format, r.width, r.height) == ("PNG", 64, 64)


def test_decompression_bomb_refused_from_header_without_decoding() -> None:
    # 20000 x 20000 = 400 MP > default 256 MP
    assert_rejected(run(png_with_header(20_000, 20_000)), "decompression_bomb")
    # The file carries no pixel data: had it been decoded, the reason would be "truncated".
    r = run(png_with_header(1000, 1000), max_image_pixels=999_999)
    assert_rejected(r, "decompression_bomb")
    assert (r.width, r.height) == (1000, 1000)
    assert "1000x1000" in (r.detail or "")


def test_limit_above_pillows_own_ceiling_is_honoured() -> None:
    # 15000^2 = 225 MP: above Pillow's default ceiling (~179 MP) but within the caller's 256 MP limit, so the
    # header passes and the (empty) pixel data is then found truncated; Pillow's global is restored after.
    before = Image.MAX_IMAGE_PIXELS
    r = run(png_with_header(15_000, 15_000), max_image_pixels=256_000_000)
    assert_rejected(r, "truncated")
    assert (r.width, r.height) == (15_000, 15_000)
    assert before == Image.MAX_IMAGE_PIXELS
    assert_rejected(run(png_with_header(15_000, 15_000), max_image_pixels=200_000_000), "decompression_bomb")


def test_zero_width_header_is_too_small() -> None:
    assert_rejected(run(png_with_header(0, 10)), "too_small")


def test_aspect_ratio_reject_from_target_size() -> None:
    r = run(encode(Image.new("RGB", (2010, 10)), "PNG"))
    assert_rejected(r, "aspect_ratio")
    assert (r.width, r.height) == (2010, 10)
    assert "aspect ratio" in (r.detail or "")


def test_eps_is_not_opened() -> None:
    # EPS would run Ghostscript on untrusted bytes: never handed to Pillow
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\nshowpage\n"
    assert run(eps).status == "rejected"


# --------------------------------------------------------------------------------------------------------
# images: big inputs (bounded memory / time)
# --------------------------------------------------------------------------------------------------------

_BIG_JPEG_SCRIPT = """
import json, resource, sys, time
from vlmforge.tasks.media import process_image
data = open(sys.argv[1], "rb").read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
r = process_image(data, target_size=lambda h, w: (840, 1148), max_pixels=1_000_000)
print(json.dumps({"status": r.status, "size": [r.out_width, r.out_height], "notes": list(r.notes),
                  "seconds": time.perf_counter() - t0,
                  "rss_growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


def test_very_large_jpeg_resized_with_bounded_memory(tmp_path: Path) -> None:
    width, height = 12_000, 9_000  # 108 MP: 324 MB as decoded RGB
    img = Image.new("RGB", (width, height), (30, 120, 200))
    img.paste((250, 40, 40), (0, 0, width // 2, height // 2))
    path = tmp_path / "big.jpg"
    img.save(path, format="JPEG", quality=80)
    del img
    proc = subprocess.run(
        [sys.executable, "-c", _BIG_JPEG_SCRIPT, str(path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok"
    assert out["size"] == [1148, 840]
    assert "jpeg_draft_scaled" in out["notes"] and "resized" in out["notes"]
    # DCT-scaled decode (1/8) keeps the peak far below one full-resolution decode (324 MB)
    assert out["rss_growth_mb"] < 120, out
    assert out["seconds"] < 10, out


# --------------------------------------------------------------------------------------------------------
# images: real files made by other projects
# --------------------------------------------------------------------------------------------------------


def _real_media_dir() -> Path:
    env = os.environ.get("VLMFORGE_REAL_MEDIA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared/testdata/real-media"


REAL = _real_media_dir()
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"real-media test files not found at {REAL}")


def real(name: str) -> bytes:
    return (REAL / name).read_bytes()


@needs_real
@pytest.mark.parametrize(
    "name",
    [
        "rgb.jpg",
        "iptc.jpg",
        "hopper_16bit_qtables.jpg",
        "photoshop-200dpi-broken.jpg",
        "truncated_exif_dpi.jpg",
        "truncated_app14.jpg",
        "exif_gps.jpg",
        "flower2.webp",
    ],
)
def test_real_valid_files_are_kept(name: str) -> None:
    data = real(name)
    r = run(data)
    assert_ok(r)
    assert r.kept_original and r.out_bytes == data
    with Image.open(io.BytesIO(data)) as ref:
        assert (r.width, r.height) == ref.size


@needs_real
@pytest.mark.parametrize("orientation", [3, 5, 8])
def test_real_exif_orientations(orientation: int) -> None:
    data = real(f"hopper_orientation_{orientation}.jpg")
    r = run(data)
    assert_ok(r)
    assert not r.kept_original and f"exif_orientation_{orientation}_applied" in r.notes
    expected = ImageOps.exif_transpose(decode(data))
    out = decode(r.out_bytes or b"")
    assert out.size == expected.size == (r.width, r.height)
    diff = np.abs(np.asarray(out).astype(int) - np.asarray(expected.convert("RGB")).astype(int))
    assert diff.mean() < 4


@needs_real
@pytest.mark.parametrize(
    ("name", "mode", "ext", "note"),
    [
        ("16bit.cropped.tif", "I;16", "jpg", None),
        ("la.tga", "LA", "png", "alpha_composited_on_white"),
        ("different_transparency_merged.png", "RGBA", "png", "alpha_composited_on_white"),
        ("dispose_bgnd_rgba.gif", "P", "png", "alpha_composited_on_white"),
        ("hopper.qoi", "RGB", "jpg", None),
        ("decompression_bomb_extents.gif", "P", "png", None),
    ],
)
def test_real_files_needing_conversion(name: str, mode: str, ext: str, note: str | None) -> None:
    r = run(real(name))
    assert_ok(r)
    assert r.mode == mode and r.out_ext == ext and not r.kept_original
    if note:
        assert note in r.notes
    out = decode(r.out_bytes or b"")
    assert out.mode == "RGB" and out.size == (r.out_width, r.out_height) == (r.width, r.height)


@needs_real
def test_real_16bit_tiff_keeps_its_dynamic_range() -> None:
    r = run(real("16bit.cropped.tif"))
    out = np.asarray(decode(r.out_bytes or b"").convert("L"))
    assert int(out.max()) - int(out.min()) > 20  # not clipped to a flat white image


@needs_real
@pytest.mark.parametrize(
    ("name", "reasons"),
    [
        ("cross_scan_line_truncated.tga", {"truncated", "decode_error"}),
        ("crash-0c7e0e8e11ce787078f00b5b0ca409a167f070e0.tif", {"decode_error"}),
        ("decompression_bomb.ico", {"decompression_bomb"}),
    ],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_real_broken_files_rejected(name: str, reasons: set[str]) -> None:
    r = run(real(name))
    assert r.status == "rejected" and r.reason in reasons, (r.reason, r.detail)
    assert r.detail


@needs_real
def test_real_non_srgb_icc_converted_on_reencode() -> None:
    data = real("truncated_exif_dpi.jpg")  # embeds "Generic RGB Profile"
    r = run(data, image_format="png")
    assert_ok(r)
    assert "icc_converted_to_srgb" in r.notes
    out = decode(r.out_bytes or b"")
    assert "icc_profile" not in out.info and out.size == (480, 640)
    # kept files are left alone (profile and all)
    assert run(data).out_bytes == data


@needs_real
def test_real_bomb_rejected_fast() -> None:
    t0 = time.perf_counter()
    assert_rejected(run(real("decompression_bomb.ico")), "decompression_bomb")
    assert time.perf_counter() - t0 < 0.5


# --------------------------------------------------------------------------------------------------------
# videos
# --------------------------------------------------------------------------------------------------------


def all_frames(n: int, fps: float) -> list[int]:
    return list(range(n))


def make_video(
    *,
    codec: str = "libx264",
    fmt: str = "mp4",
    frames: int = 32,
    width: int = 64,
    height: int = 48,
    fps: int = 8,
    rotation: float | None = None,
    path: Path | None = None,
) -> bytes:
    buf = io.BytesIO()
    target: io.BytesIO | str = str(path) if path is not None else buf
    options = {"movflags": "faststart"} if path is not None and fmt == "mp4" else {}
    with av.open(target, "w", format=fmt, options=options) as container:
        stream = container.add_stream(codec, rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if rotation is not None:
            stream.set_display_rotation(rotation)
        rng = np.random.default_rng(0)
        for _ in range(frames):
            arr = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path.read_bytes() if path is not None else buf.getvalue()


@pytest.fixture(scope="module")
def mp4() -> bytes:
    return make_video()


def test_video_probe_h264_mp4(mp4: bytes) -> None:
    seen: list[tuple[int, float]] = []

    def choose(n: int, fps: float) -> list[int]:
        seen.append((n, fps))
        return [0, 10, 20, 31]

    r = probe_video(mp4, choose_frames=choose)
    assert r.status == "ok" and r.reason is None, r
    assert (r.codec, r.width, r.height, r.rotation) == ("h264", 64, 48, 0)
    assert r.frames == 32 and r.fps == pytest.approx(8.0) and r.duration == pytest.approx(4.0)
    assert seen == [(32, 8.0)]
    assert r.sampled_indices == (0, 10, 20, 31)


def test_video_webm_without_frame_count_counts_packets() -> None:
    r = probe_video(make_video(codec="libvpx-vp9", fmt="webm", frames=20), choose_frames=all_frames)
    assert r.status == "ok", r
    assert (r.codec, r.frames, r.width, r.height) == ("vp9", 20, 64, 48)
    assert r.fps == pytest.approx(8.0) and r.sampled_indices == tuple(range(20))


@pytest.mark.parametrize(("ccw", "rotation"), [(90, 270), (-90, 90), (180, 180)])
def test_video_rotation_metadata_applied(ccw: float, rotation: int) -> None:
    r = probe_video(make_video(rotation=ccw, frames=4), choose_frames=all_frames)
    assert r.status == "ok", r
    assert r.rotation == rotation
    assert (r.width, r.height) == ((48, 64) if rotation in (90, 270) else (64, 48))


def test_video_truncated_copy_rejected(mp4: bytes) -> None:
    r = probe_video(mp4[: len(mp4) // 2], choose_frames=all_frames)  # moov atom at the end: lost
    assert r.status == "rejected" and r.reason == "video_decode_error", r
    assert r.reason in VIDEO_REASONS and r.sampled_indices == ()


def test_video_truncated_faststart_detects_missing_frames(tmp_path: Path) -> None:
    data = make_video(path=tmp_path / "fs.mp4")
    cut = data[: len(data) // 2]  # index says 32 frames, only about half the samples are present
    r = probe_video(cut, choose_frames=all_frames)
    assert r.status == "rejected" and r.reason == "video_decode_error", r
    assert r.frames == 32 and "decodable" in (r.detail or "")
    # the first frame alone is still intact
    assert probe_video(cut, choose_frames=lambda n, fps: [0]).status == "ok"


def test_video_random_bytes_and_images_are_not_videos() -> None:
    r = probe_video(np.random.default_rng(2).bytes(5000), choose_frames=all_frames)
    assert (r.status, r.reason) == ("rejected", "not_a_video")
    r = probe_video(encode(photo(32, 32), "JPEG"), choose_frames=all_frames)
    assert (r.status, r.reason) == ("rejected", "not_a_video")
    assert probe_video(b"", choose_frames=all_frames).reason == "zero_size"


def test_video_audio_only_has_no_video_stream() -> None:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\x00\x00" * 800)
    r = probe_video(buf.getvalue(), choose_frames=all_frames)
    assert (r.status, r.reason) == ("rejected", "no_video_stream")


def test_video_timeout(mp4: bytes) -> None:
    r = probe_video(mp4, choose_frames=all_frames, timeout_s=0.0)
    assert (r.status, r.reason) == ("rejected", "video_timeout")


def test_video_bad_frame_selection(mp4: bytes) -> None:
    r = probe_video(mp4, choose_frames=lambda n, fps: [n])
    assert (r.status, r.reason) == ("rejected", "frame_selection")

    def boom(n: int, fps: float) -> list[int]:
        raise ValueError("video too long for the model")

    r = probe_video(mp4, choose_frames=boom)
    assert (r.reason, r.frames) == ("frame_selection", 32)
    assert "too long" in (r.detail or "")


@needs_real
@pytest.mark.parametrize(("name", "rotation"), [("video_180.mov", 180), ("video_270.mov", 270)])
def test_real_rotated_videos(name: str, rotation: int) -> None:
    r = probe_video(real(name), choose_frames=all_frames)
    assert r.status == "ok", r
    assert r.codec == "h264" and r.frames == 3 and r.rotation == rotation
    assert (r.width, r.height) == ((320, 568) if rotation == 270 else (568, 320))


@needs_real
def test_real_unordered_timestamps() -> None:
    r = probe_video(real("unordered.mov"), choose_frames=all_frames)
    assert r.status == "ok", r
    assert (r.width, r.height, r.frames, r.rotation) == (50, 50, 4, 0)
    assert r.sampled_indices == (0, 1, 2, 3) and r.fps > 0
