"""The libjpeg-turbo decode of resized JPEGs (``tasks/media/jpeg_fast_decode``) gives Pillow's pixels.

Every JPEG of Pillow's own test images (``corpus_fixture``), scikit-image's data JPEGs and generated ones
(every chroma subsampling, progressive, grey, restart markers, odd sizes) is drafted at each DCT scale
Pillow's ``draft`` picks and decoded both ways: where the fast decoder takes a file, its pixels equal
Pillow's; and ``process_image`` gives the same result (status, reason, detail, notes, output bytes) with and
without the fast decoder, on those files and on truncated and damaged ones.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import skimage
from corpus_fixture import PILLOW, Unavailable, fetch_sdist, files_under
from PIL import Image, ImageCms

from vlmforge.tasks.media import jpeg_fast_decode, process_image
from vlmforge.tasks.media.image import ImageResult
from vlmforge.tasks.media.jpeg_fast_decode import turbo_decode
from vlmforge.tasks.media.jpeg_layout import jpeg_layout

#: draft targets as fractions of the stored size: Pillow picks scale 1, 2, 4 and 8 for them
DRAFT_FRACTIONS = (0.7, 0.45, 0.2, 0.1)


def _photo(width: int, height: int, seed: int) -> Image.Image:
    """A smooth photo-like picture with edges and noise, so chroma and every DCT band carry signal."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1)
    noisy = base + rng.integers(-40, 40, size=base.shape)
    noisy[height // 3 : height // 2, width // 4 : width // 2] = (250, 20, 40)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def _generated() -> dict[str, bytes]:
    """JPEGs of every subsampling and coding the fast decoder should take, at odd and even sizes."""
    out: dict[str, bytes] = {}
    for width, height in ((333, 217), (64, 48), (1001, 613), (17, 9), (3, 3), (11, 5)):
        img = _photo(width, height, width)
        arr = np.asarray(img)
        for sub in ("444", "422", "420", "440", "411"):
            out[f"turbo-{sub}-{width}x{height}.jpg"] = simplejpeg.encode_jpeg(arr, 90, "RGB", sub)
        for sub in ("4:4:4", "4:2:2", "4:2:0"):
            for progressive in (False, True):
                buf = io.BytesIO()
                img.save(buf, "JPEG", quality=85, subsampling=sub, progressive=progressive)
                out[f"pil-{sub}-p{int(progressive)}-{width}x{height}.jpg"] = buf.getvalue()
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=80, restart_marker_blocks=3)
        out[f"restart-{width}x{height}.jpg"] = buf.getvalue()
        for progressive in (False, True):
            buf = io.BytesIO()
            img.convert("L").save(buf, "JPEG", quality=88, progressive=progressive)
            out[f"grey-p{int(progressive)}-{width}x{height}.jpg"] = buf.getvalue()
    return out


def _declined() -> dict[str, bytes]:
    """JPEGs the fast decoder must leave to Pillow: CMYK (Adobe), an ICC profile, a progressive file whose
    last scans are cut off (coefficients left unrefined, libjpeg smooths blocks)."""
    img = _photo(200, 120, 7)
    out: dict[str, bytes] = {}
    buf = io.BytesIO()
    img.convert("CMYK").save(buf, "JPEG")
    out["cmyk.jpg"] = buf.getvalue()
    buf = io.BytesIO()
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    img.save(buf, "JPEG", icc_profile=icc)
    out["icc.jpg"] = buf.getvalue()
    buf = io.BytesIO()
    img.save(buf, "JPEG", progressive=True)
    data = buf.getvalue()
    third_scan = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"][2]
    out["progressive-unrefined.jpg"] = data[:third_scan] + b"\xff\xd9"
    return out


def _corpus() -> Iterator[tuple[str, bytes]]:
    yield from _generated().items()
    data_dir = Path(skimage.__file__).parent / "data"
    for path in sorted(data_dir.glob("*.jpg")):
        yield f"skimage/{path.name}", path.read_bytes()


def _pillow_jpegs() -> list[tuple[str, bytes]]:
    try:
        folder = fetch_sdist(PILLOW)
    except Unavailable as exc:
        pytest.skip(str(exc))
    paths = [p for p in files_under(folder) if p.suffix.lower() in (".jpg", ".jpeg")]
    return [(f"pillow/{p.relative_to(folder)}", p.read_bytes()) for p in paths]


def _drafted(data: bytes, fraction: float) -> Image.Image | None:
    img = Image.open(io.BytesIO(data))
    if img.format != "JPEG":
        return None
    target = (max(1, int(img.width * fraction)), max(1, int(img.height * fraction)))
    img.draft("RGB", target)
    return img


def _pillow_pixels(data: bytes, fraction: float) -> np.ndarray | str:
    img = _drafted(data, fraction)
    assert img is not None
    try:
        img.load()
    except Exception as exc:  # noqa: BLE001 - the verdict is compared, not raised
        return f"{type(exc).__name__}: {exc}"
    return np.asarray(img)


def _compare(files: list[tuple[str, bytes]]) -> tuple[int, list[str]]:
    """(file-scale pairs the fast decoder took, the pairs whose pixels differ from Pillow's)."""
    taken, differ = 0, []
    for name, data in files:
        for fraction in DRAFT_FRACTIONS:
            try:
                img = _drafted(data, fraction)
            except Exception:  # noqa: BLE001 - Pillow cannot open it: process_image's test covers it
                continue
            if img is None:
                continue
            fast = turbo_decode(data, img)
            if fast is None:
                continue
            taken += 1
            pillow = _pillow_pixels(data, fraction)
            fast_pixels = np.asarray(fast)
            if isinstance(pillow, str) or fast.mode != img.mode or not np.array_equal(fast_pixels, pillow):
                differ.append(f"{name} at {fraction}: {pillow if isinstance(pillow, str) else 'pixels'}")
    return taken, differ


def test_fast_decode_equals_pillow_on_generated_and_skimage_jpegs() -> None:
    files = list(_corpus())
    taken, differ = _compare(files)
    assert differ == []
    # every generated file is taken at every scale, but 3x3 ones: simplejpeg would pick a smaller scale
    # giving the same size (3/8 for 1/2), so they are left to Pillow
    generated = [name for name in _generated() if "-3x3" not in name]
    assert taken >= len(generated) * len(DRAFT_FRACTIONS), taken


def test_fast_decode_equals_pillow_on_pillows_test_jpegs() -> None:
    files = _pillow_jpegs()
    taken, differ = _compare(files)
    assert differ == []
    assert taken >= 80, f"only {taken} file-scale pairs of {len(files)} Pillow JPEGs taken"


@pytest.mark.parametrize("name", sorted(_declined()))
def test_files_whose_decode_could_differ_are_left_to_pillow(name: str) -> None:
    data = _declined()[name]
    for fraction in DRAFT_FRACTIONS:
        img = _drafted(data, fraction)
        assert img is not None
        assert turbo_decode(data, img) is None


def test_the_unrefined_progressive_file_is_seen_as_such() -> None:
    layout = jpeg_layout(_declined()["progressive-unrefined.jpg"])
    assert layout is not None and layout.sof == 0xC2 and not layout.fully_refined
    complete = jpeg_layout(_generated()["pil-4:2:0-p1-333x217.jpg"])
    assert complete is not None and complete.fully_refined


def _damaged(data: bytes) -> dict[str, bytes]:
    """Truncated and corrupted copies of one JPEG."""
    scan = data.index(b"\xff\xda")
    out = {f"cut-{pct}": data[: scan + (len(data) - scan) * pct // 100] for pct in (5, 50, 95, 99)}
    out["no-eoi"] = data[:-2]
    middle = bytearray(data)
    for i in range(scan + 40, len(data) - 10, 97):
        middle[i] ^= 0x5A
    out["flipped-bits"] = bytes(middle)
    junk = bytearray(data)
    junk[scan + 30 : scan + 60] = b"\xff\xd3" * 15
    out["bad-restart-markers"] = bytes(junk)
    out["header-only"] = data[: scan + 14]
    return out


def _results_both_ways(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[ImageResult, ImageResult]:
    def run() -> ImageResult:
        return process_image(
            data, target_size=lambda h, w: (max(1, h // 3), max(1, w // 3)), max_pixels=0, min_side=1
        )

    fast = run()
    with monkeypatch.context() as patch:
        patch.setattr(jpeg_fast_decode, "RESIZED_JPEG_DECODERS", ())
        pillow_only = run()
    return fast, pillow_only


def test_process_image_results_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same status, reason, detail, notes and output bytes with and without the fast decoder."""
    generated = _generated()
    files = [*generated.items(), *_declined().items()]
    for name in ("pil-4:2:0-p0-1001x613.jpg", "pil-4:2:0-p1-1001x613.jpg", "grey-p1-333x217.jpg"):
        files += [(f"{name} {how}", bad) for how, bad in _damaged(generated[name]).items()]
    rejected = 0
    for name, data in files:
        fast, pillow_only = _results_both_ways(data, monkeypatch)
        assert fast == pillow_only, name
        rejected += fast.status == "rejected"
    assert rejected >= 10, "the damaged files must include rejects"


def test_process_image_results_are_unchanged_on_pillows_test_jpegs(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, data in _pillow_jpegs():
        fast, pillow_only = _results_both_ways(data, monkeypatch)
        assert fast == pillow_only, name
