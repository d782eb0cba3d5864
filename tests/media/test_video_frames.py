"""Tests for vlmforge.tasks.media.frames: sampled frames written as images (``--video-mode frames``)."""

from __future__ import annotations

import io
from typing import Literal

import av
import numpy as np
import pytest
from conftest import REAL_MEDIA
from PIL import Image

from vlmforge.schemas.config import MediaOptions, TokenOptions
from vlmforge.schemas.presets import ModelPreset
from vlmforge.tasks.geometry.media_tokens import sample_video_frames, video_tokens
from vlmforge.tasks.geometry.model_geometry import ModelGeometry
from vlmforge.tasks.geometry.preset_loading import load_preset
from vlmforge.tasks.media.frames import FrameSize, sample_frames
from vlmforge.tasks.media.video import VIDEO_REASONS, probe_video


def model_frame_size(preset: ModelPreset, *, video_max_pixels: int | None = None) -> FrameSize:
    """The run's frame size for ``preset`` (what ``--video-mode frames`` stores)."""
    return ModelGeometry.of(
        preset, TokenOptions(), MediaOptions(video_max_pixels=video_max_pixels)
    ).frame_size


needs_real = pytest.mark.skipif(
    not REAL_MEDIA.is_dir(), reason=f"real-media test files not found at {REAL_MEDIA}"
)


def level(k: int) -> int:
    """Grey level of frame ``k`` of :func:`numbered_video`."""
    return 8 + 6 * k


def numbered_video(
    frames: int = 40,
    width: int = 96,
    height: int = 64,
    fps: int = 8,
    rotation: float | None = None,
    halves: bool = False,
) -> bytes:
    """H.264 MP4 whose frame ``k`` is a flat grey of :func:`level` ``(k)``; with ``halves`` the stored left
    half is red and the right half blue instead (to see which way a frame was turned)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if rotation is not None:
            stream.set_display_rotation(rotation)
        for k in range(frames):
            arr = np.full((height, width, 3), level(k), np.uint8)
            if halves:
                arr[:, : width // 2] = (220, 20, 20)
                arr[:, width // 2 :] = (20, 20, 220)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def decode(data: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(data))
    img.load()
    return img


def every_fifth(n: int, fps: float) -> list[int]:
    return list(range(0, n, 5))


def test_frames_follow_the_sampled_indices_in_order() -> None:
    r = sample_frames(numbered_video(), choose_frames=every_fifth, frame_size=lambda n, h, w: (32, 48))
    assert r.status == "ok" and r.reason is None, r.video
    assert r.video.sampled_indices == (0, 5, 10, 15, 20, 25, 30, 35)
    assert len(r.frames) == 8 and r.ext == "jpg" and (r.width, r.height) == (48, 32)
    for index, data in zip(r.video.sampled_indices, r.frames, strict=True):
        img = decode(data)
        assert img.format == "JPEG" and img.size == (48, 32) and img.mode == "RGB"
        assert abs(float(np.asarray(img).mean()) - level(index)) < 4, index


def test_frame_size_gets_the_sample_count_and_displayed_size() -> None:
    calls: list[tuple[int, int, int]] = []

    def size(n: int, h: int, w: int) -> tuple[int, int]:
        calls.append((n, h, w))
        return 56, 28

    r = sample_frames(numbered_video(frames=12, rotation=90), choose_frames=every_fifth, frame_size=size)
    assert r.status == "ok"
    assert calls == [(3, 96, 64)]  # once, displayed (rotated) size: 96 high x 64 wide
    assert (r.width, r.height) == (28, 56)


@pytest.mark.parametrize(("ccw", "top", "bottom"), [(-90, "red", "blue"), (90, "blue", "red")])
def test_rotated_video_frames_are_written_upright(ccw: float, top: str, bottom: str) -> None:
    data = numbered_video(frames=4, width=96, height=64, rotation=ccw, halves=True)
    probe = probe_video(data, choose_frames=lambda n, fps: [0])
    r = sample_frames(data, choose_frames=lambda n, fps: [0], frame_size=lambda n, h, w: (h, w))
    assert r.status == "ok"
    assert (r.width, r.height) == (probe.width, probe.height) == (64, 96)
    img = np.asarray(decode(r.frames[0])).astype(int)
    colour = {"red": 0, "blue": 2}
    assert img[10, 32, colour[top]] > 150 and img[85, 32, colour[bottom]] > 150


@pytest.mark.parametrize("preset_name", ["qwen2_5_vl", "qwen3_vl"])
def test_model_frame_size_is_what_the_video_processor_picks(preset_name: str) -> None:
    preset = load_preset(preset_name)
    data = numbered_video(frames=40, width=320, height=240, fps=8)

    def choose(n: int, fps: float) -> list[int]:
        return sample_video_frames(preset, n, fps)

    r = sample_frames(data, choose_frames=choose, frame_size=model_frame_size(preset))
    assert r.status == "ok"
    n = len(r.frames)
    no_cap = {"frame_cap": None}  # no --max-pixels: the preset's own video bounds
    expected = video_tokens(
        preset, n, 240, 320, indices=r.video.sampled_indices, video_fps=r.video.fps, **no_cap
    )
    assert (r.height, r.width) == (expected.resized_height, expected.resized_width)
    assert r.height % preset.factor == 0 and r.width % preset.factor == 0
    # stored at that size, the frames cost exactly the tokens of the video: the processor leaves them alone
    again = video_tokens(
        preset, n, r.height, r.width, indices=r.video.sampled_indices, video_fps=r.video.fps, **no_cap
    )
    assert (again.tokens, again.resized_height, again.resized_width) == (
        expected.tokens,
        r.height,
        r.width,
    )


def test_video_max_pixels_caps_each_frame() -> None:
    preset = load_preset("qwen2_5_vl")
    size = model_frame_size(preset, video_max_pixels=128 * 28 * 28)
    h, w = size(8, 1080, 1920)
    assert h * w <= 128 * 28 * 28 and h % 28 == 0 and w % 28 == 0
    big_h, big_w = model_frame_size(preset)(8, 1080, 1920)
    assert big_h * big_w > h * w


@pytest.mark.parametrize(
    ("fmt", "ext", "pil"), [("png", "png", "PNG"), ("webp", "webp", "WEBP"), ("keep", "jpg", "JPEG")]
)
def test_frame_image_format(fmt: Literal["keep", "jpeg", "png", "webp"], ext: str, pil: str) -> None:
    r = sample_frames(
        numbered_video(frames=6),
        choose_frames=lambda n, fps: [1, 4],
        frame_size=lambda n, h, w: (28, 56),
        image_format=fmt,
    )
    assert r.status == "ok" and r.ext == ext and len(r.frames) == 2
    assert {decode(f).format for f in r.frames} == {pil}


def test_frames_are_deterministic() -> None:
    data = numbered_video(frames=10)
    first = sample_frames(data, choose_frames=every_fifth, frame_size=lambda n, h, w: (28, 28))
    second = sample_frames(data, choose_frames=every_fifth, frame_size=lambda n, h, w: (28, 28))
    assert first.frames == second.frames


def test_rejects_carry_no_frames() -> None:
    r = sample_frames(
        b"<html>not a video</html>", choose_frames=every_fifth, frame_size=lambda n, h, w: (28, 28)
    )
    assert (r.status, r.reason, r.frames, r.ext) == ("rejected", "not_a_video", (), None)
    assert r.reason in VIDEO_REASONS
    data = numbered_video(frames=20)
    cut = sample_frames(
        data[: len(data) // 2], choose_frames=every_fifth, frame_size=lambda n, h, w: (28, 28)
    )
    assert cut.status == "rejected" and cut.frames == ()
    slow = sample_frames(data, choose_frames=every_fifth, frame_size=lambda n, h, w: (28, 28), timeout_s=0.0)
    assert (slow.reason, slow.frames) == ("video_timeout", ())


def test_frame_size_error_is_a_frame_selection_reject() -> None:
    def too_short(n: int, h: int, w: int) -> tuple[int, int]:
        raise ValueError(f"video has {n} frame(s); at least 2 are needed")

    r = sample_frames(numbered_video(frames=6), choose_frames=lambda n, fps: [0], frame_size=too_short)
    assert (r.status, r.reason, r.frames) == ("rejected", "frame_selection", ())
    assert "at least 2" in (r.video.detail or "")


@needs_real
def test_real_rotated_video_frames() -> None:
    data = (REAL_MEDIA / "video_270.mov").read_bytes()
    r = sample_frames(data, choose_frames=lambda n, fps: list(range(n)), frame_size=lambda n, h, w: (h, w))
    assert r.status == "ok" and r.video.rotation == 270
    assert len(r.frames) == 3 and (r.width, r.height) == (320, 568)
    assert all(decode(f).size == (320, 568) for f in r.frames)
