"""The media stage's side of issue 20's one-frame videos and the ``n_frames`` media column, through the run's
own media step (:class:`~vlmforge.tasks.batch.normalise.Normaliser`) on files made here with PyAV / Pillow."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import make_video
from PIL import Image

from vlmforge.schemas.config import MediaOptions, RunConfig, TokenOptions
from vlmforge.schemas.presets import ModelPreset
from vlmforge.schemas.rows import MediaRow
from vlmforge.schemas.tables import MEDIA
from vlmforge.tasks.batch.normalise import Normaliser
from vlmforge.tasks.geometry.media_tokens import sample_video_frames, video_tokens
from vlmforge.tasks.geometry.model_geometry import ModelGeometry, geometry_of
from vlmforge.tasks.geometry.preset_loading import load_preset
from vlmforge.tasks.media.frames import FrameSize, sample_frames
from vlmforge.tasks.storage import ContentStore


def model_frame_size(preset: ModelPreset, *, video_max_pixels: int | None = None) -> FrameSize:
    """The run's frame size for ``preset`` (what ``--video-mode frames`` stores)."""
    return ModelGeometry.of(
        preset, TokenOptions(), MediaOptions(video_max_pixels=video_max_pixels)
    ).frame_size


def _media_step(tmp_path: Path, **options: object) -> Normaliser:
    cfg = RunConfig(release=str(tmp_path), out=str(tmp_path / "out"), **options)  # type: ignore[arg-type]
    return Normaliser(cfg, geometry_of(cfg.tokens, cfg.media), ContentStore(str(tmp_path / "store")))


def _row(ref: str, kind: str) -> MediaRow:
    return MediaRow(subset="s", sample_id="a", line=1, index=0, ref=ref, kind=kind)


def _gif(frames: int) -> bytes:
    imgs = [Image.new("RGB", (80, 60), (40 * k, 200 - 40 * k, 90)) for k in range(frames)]
    buf = io.BytesIO()
    imgs[0].save(buf, format="GIF", save_all=frames > 1, append_images=imgs[1:], duration=100, loop=0)
    return buf.getvalue()


def test_n_frames_is_a_nullable_int32_media_column() -> None:
    field = MEDIA.field("n_frames")
    assert str(field.type) == "int32" and field.nullable
    # added after the existing columns: they keep their positions
    assert MEDIA.names.index("n_frames") > MEDIA.names.index("frame_bytes")


@pytest.mark.parametrize(("frames", "expected"), [(1, 1), (3, 3)])
def test_image_rows_say_how_many_frames_the_file_had(tmp_path: Path, frames: int, expected: int) -> None:
    data = _gif(frames)
    with Image.open(io.BytesIO(data)) as img:
        assert getattr(img, "n_frames", 1) == frames  # Pillow's own count of the file written
    row = _row("a.gif", "image")
    outcome = _media_step(tmp_path)(row, data)
    assert outcome.ok and row.status == "ok"
    assert row.n_frames == expected


def test_a_rejected_image_has_no_frame_count(tmp_path: Path) -> None:
    row = _row("a.gif", "image")
    outcome = _media_step(tmp_path)(row, b"GIF89a" + b"\x00" * 40)
    assert not outcome.ok and row.status == "rejected" and row.n_frames is None


@pytest.mark.parametrize("video_mode", ["keep", "frames"])
def test_video_rows_count_the_frames_sampled(tmp_path: Path, video_mode: str) -> None:
    for n, ref in ((1, "one.mp4"), (24, "many.mp4")):
        row = _row(ref, "video")
        outcome = _media_step(tmp_path / f"{video_mode}-{n}", video_mode=video_mode)(
            row, make_video(frames=n)
        )
        assert outcome.ok and outcome.video is not None, row.reason
        assert row.frames == n and row.n_frames == row.sampled_frames == len(row.frame_indices or [])
        assert row.n_frames == outcome.video.n_sampled_frames
        if n == 1:
            assert row.frame_indices == [0]


def test_one_frame_video_frames_mode_writes_one_frame_at_the_model_size() -> None:
    q25 = load_preset("qwen2_5_vl")
    video = make_video(frames=1, width=64, height=48)
    out = sample_frames(
        video,
        choose_frames=lambda n, fps: sample_video_frames(q25, n, fps),
        frame_size=model_frame_size(q25),
        image_format="png",
    )
    assert out.status == "ok" and out.video.sampled_indices == (0,) and len(out.frames) == 1
    expected = video_tokens(q25, 2, 48, 64, frame_cap=None)  # one frame costs what the padded pair costs
    assert (out.height, out.width) == (expected.resized_height, expected.resized_width)
    with Image.open(io.BytesIO(out.frames[0])) as img:
        assert img.size == (out.width, out.height)


def test_one_frame_video_is_still_refused_for_qwen3_with_the_reason() -> None:
    """Qwen3VLVideoProcessor's smart_resize raises for fewer frames than the temporal patch, so Bridge's
    QwenVLTaskEncoder cannot count a one-frame video for Qwen3-VL: the reject names the limit."""
    q3 = load_preset("qwen3_vl")
    out = sample_frames(
        make_video(frames=1),
        choose_frames=lambda n, fps: sample_video_frames(q3, n, fps),
        frame_size=model_frame_size(q3),
    )
    assert (out.status, out.reason) == ("rejected", "frame_selection")
    assert "1 frame(s)" in (out.video.detail or "") and "at least 2" in (out.video.detail or "")
