"""The decode budget: every image priced from its header on the path it will take, before any pixel is
decoded; real Pillow images built here, each format's own header read by Pillow."""

from __future__ import annotations

import io
import math
import resource
import time

import pytest
from PIL import Image

from vlmforge.tasks.media.decode_budget import (
    DEFAULT_FULL_DECODE_BPP,
    FULL_DECODE_BPP,
    JPEG_DRAFT_BPP,
    PNG_STRIP_BPP,
    DecodeBudget,
    decode_cost,
    full_decode_bpp,
)
from vlmforge.tasks.media.image import process_image

SIZE = (96, 64)
FULL_FORMATS = ("WEBP", "GIF", "TIFF", "TGA", "PCX", "BMP", "PPM", "QOI", "SGI", "PNG")


def _target(h: int, w: int) -> tuple[int, int]:
    return 28, 28


def _encoded(fmt: str, mode: str = "RGB", size: tuple[int, int] = SIZE, **save: object) -> bytes:
    img = Image.linear_gradient("L").resize(size)
    img = (
        img if mode == "L" else Image.merge("RGB", [img, img.transpose(Image.Transpose.FLIP_LEFT_RIGHT), img])
    )
    buf = io.BytesIO()
    img.save(buf, fmt, **save)
    return buf.getvalue()


def webp_bomb(width: int, height: int) -> bytes:
    """A lossless WebP of one colour whose header is patched to ``width`` x ``height``: every pixel costs the
    bitstream 0 bits, so libwebp decodes it whole at that size (38 bytes for 15000x15000)."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buf, "WEBP", lossless=True)
    data = bytearray(buf.getvalue())
    bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1)
    data[21:25] = (bits | (width - 1) | ((height - 1) << 14)).to_bytes(4, "little")
    return bytes(data)


def _opened(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


@pytest.mark.parametrize("fmt", FULL_FORMATS)
def test_a_whole_decode_is_priced_per_format_and_refused_over_budget(fmt: str) -> None:
    data = _encoded(fmt)
    with _opened(data) as img:
        cost = decode_cost(img, None)
        assert cost == math.ceil(SIZE[0] * SIZE[1] * full_decode_bpp(img.format or "", img.mode))
    # the image needs a resize and is decoded whole: one byte under its price is a refusal, naming it
    refused = process_image(data, target_size=_target, max_pixels=784, decode_budget=DecodeBudget(cost - 1))
    assert (refused.status, refused.reason) == ("rejected", "decode_budget")
    assert (
        refused.detail is not None
        and refused.detail.startswith(f"{img.format} ")
        and "whole" in refused.detail
    )
    ok = process_image(data, target_size=_target, max_pixels=784, decode_budget=DecodeBudget(cost))
    assert ok.status == "ok", ok


def test_webp_costs_most_and_grey_a_quarter() -> None:
    assert full_decode_bpp("WEBP", "RGB") == max(FULL_DECODE_BPP.values())
    assert full_decode_bpp("TIFF", "RGB") == DEFAULT_FULL_DECODE_BPP
    with _opened(_encoded("TIFF", "L")) as grey:
        assert decode_cost(grey, None) == math.ceil(SIZE[0] * SIZE[1] * DEFAULT_FULL_DECODE_BPP / 4)


@pytest.mark.parametrize(("subsampling", "coefficients"), [(0, 6.0), (2, 3.0)])
def test_a_jpeg_decodes_reduced_but_a_progressive_one_keeps_its_coefficients(
    subsampling: int, coefficients: float
) -> None:
    size = (640, 480)
    baseline = _encoded("JPEG", size=size, subsampling=subsampling)
    progressive = _encoded("JPEG", size=size, subsampling=subsampling, progressive=True)
    with _opened(baseline) as img:
        assert decode_cost(img, "jpeg_draft") == math.ceil(size[0] * size[1] * JPEG_DRAFT_BPP)
        whole = decode_cost(img, None)
    with _opened(progressive) as img:
        assert decode_cost(img, "jpeg_draft") == math.ceil(
            size[0] * size[1] * (JPEG_DRAFT_BPP + coefficients)
        )
    # a budget a whole decode breaks and a DCT-scaled one does not: the JPEG is decoded scaled, and kept
    res = process_image(baseline, target_size=_target, max_pixels=784, decode_budget=DecodeBudget(whole - 1))
    assert res.status == "ok" and "jpeg_draft_scaled" in res.notes


def test_png_strips_are_priced_as_strips() -> None:
    with _opened(_encoded("PNG")) as img:
        assert decode_cost(img, "png_strips") == math.ceil(SIZE[0] * SIZE[1] * PNG_STRIP_BPP)


def test_the_default_budget_follows_the_header_limit_and_the_model() -> None:
    assert DecodeBudget.for_run(256_000_000, 12_845_056).max_bytes == 1_024_000_000
    # a model fed 100 MP images always decodes them, in any format
    assert DecodeBudget.for_run(256_000_000, 100_000_000).max_bytes == 100_000_000 * FULL_DECODE_BPP["WEBP"]


def test_a_38_byte_webp_of_15000x15000_is_refused_before_any_pixel() -> None:
    data = webp_bomb(15000, 15000)
    assert len(data) < 64  # and 225 MP: under the 256 MP header limit
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    res = process_image(data, target_size=_target, max_pixels=12_845_056)
    assert time.monotonic() - started < 5.0  # hang guard
    assert (res.status, res.reason) == ("rejected", "decode_budget")
    assert res.detail == "WEBP RGB 15000x15000 decoded whole needs 5,579 MiB > budget 977 MiB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: no canvas touched


def test_the_patched_webp_really_decodes_at_its_claimed_size() -> None:
    """What the budget stands in front of: the same bytes at 2000x1500 decode whole, every pixel."""
    with _opened(webp_bomb(2000, 1500)) as img:
        img.load()
        assert img.size == (2000, 1500) and img.getpixel((1999, 1499)) == (10, 20, 30)
