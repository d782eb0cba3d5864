"""The fed counts of Megatron-Bridge's batch path (:mod:`vlmforge.tasks.tokens.bridge_fed`) without Bridge:
the figures measured with Bridge 0.6.2's real encoder on the sample release (issue 32's table; the real
encoder itself runs in ``tests/training/test_bridge_fed_tokens.py``), and the property the write step relies
on: an image stored at the processor's size is fed at that size."""

from __future__ import annotations

import pytest

from vlmforge.schemas.config import TokenOptions
from vlmforge.tasks.geometry import PixelBounds
from vlmforge.tasks.geometry.preset_loading import load_preset
from vlmforge.tasks.geometry.resize_rule import smart_resize
from vlmforge.tasks.tokens.bridge_fed import FED_VIDEO, FedGeometry, fed_image, media_first
from vlmforge.tasks.tokens.feed_paths import fed_geometry

MIN_PIXELS, MAX_PIXELS = 200_704, 1_003_520


def _geometry(model: str) -> FedGeometry:
    preset = load_preset(model)
    return fed_geometry(
        preset, PixelBounds.of(preset, TokenOptions(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS))
    )


@pytest.mark.parametrize(
    ("model", "size", "fed"),
    [
        ("qwen3_vl", (400, 600), 216),  # photo-0003: encode_sample 228 (24x38), batch() 24x36
        ("qwen3_vl", (872, 1000), 864),  # photo-0005: encode_sample 837
        ("qwen2_5_vl", (400, 600), 294),  # factor 28 both times: no change
    ],
)
def test_images_as_measured_with_bridge(model: str, size: tuple[int, int], fed: int) -> None:
    assert fed_image(_geometry(model), *size)[0] == fed


@pytest.mark.parametrize(
    ("model", "frames", "size", "fed", "grid_t"),
    [
        ("qwen3_vl", 9, (288, 160), 208, 2),  # video-0001: encode_sample 225 (5x18x10), batch() 2x26x16
        ("qwen3_vl", 6, (256, 320), 220, 2),  # video-0002: encode_sample 240
        ("qwen2_5_vl", 8, (448, 252), 1104, 4),  # video-0001: encode_sample 576
        ("qwen2_5_vl", 6, (280, 392), 798, 3),  # video-0002: encode_sample 420
    ],
)
def test_videos_as_measured_with_bridge(
    model: str, frames: int, size: tuple[int, int], fed: int, grid_t: int
) -> None:
    geo = _geometry(model)
    video = FED_VIDEO[load_preset(model).video_sampler](geo, frames, *size)
    assert (video.tokens, video.grid_t) == (fed, grid_t)


@pytest.mark.parametrize("model", ["qwen3_vl", "qwen2_5_vl"])
def test_an_image_stored_at_the_processors_size_is_fed_at_that_size(model: str) -> None:
    """Why the write step stores every image on the processor's grid: qwen-vl-utils' factor-28 resize and
    the processor's round give that grid back (the README's 57,300 sizes; a coarser sweep here)."""
    geo = _geometry(model)
    f = geo.factor
    moved = 0
    for h in range(20, 2400, 37):
        for w in range(20, 2400, 41):
            if max(h, w) / min(h, w) > 150:
                continue
            target = smart_resize(h, w, f, MIN_PIXELS, MAX_PIXELS)
            assert fed_image(geo, *target)[1:] == target, (h, w, target)
            moved += fed_image(geo, h, w)[1:] != target
    # on the original sizes the double resize does move some (Qwen3's factor 32 more than 2.5's 28)
    assert moved > 0


def test_media_first_moves_every_turns_media_before_its_text() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Q"}, {"type": "video"}, {"type": "image"}]},
        {"role": "assistant", "content": "A"},
    ]
    first = media_first(messages)
    assert [p["type"] for p in first[0]["content"]] == ["video", "image", "text"]
    assert first[1] == messages[1] and messages[0]["content"][0]["type"] == "text"  # input untouched
