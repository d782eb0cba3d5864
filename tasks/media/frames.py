"""Sampled video frames written as images (``--video-mode frames``).

A video in frames mode reaches a shard as the frames the model's sampler picks, each already turned upright
(rotation metadata applied) and resized to the size the model's video processor would give it, encoded as
images. Training then loads images only: no video decoder, no resize, no seek at training time.

:func:`sample_frames` does the work in ONE decode pass: it is :func:`vlmforge.tasks.media.video.probe_video`
(the same verification, rejects, pixel limit and wall-clock limit) with a frame hook that converts each
sampled frame as it is decoded, so at most one decoded frame is held at a time. The per-frame size is the
run's model geometry's (``ModelGeometry.frame_size``: the qwen-vl-utils / Qwen3 video processor rules).

Pure functions over bytes; no I/O, no orchestration imports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from PIL import Image

from .encode import FMT_TO_EXT, EncodeFormat, ImageFormat, encode_image
from .rejects import media_reason
from .video import SampledFrame, VideoResult, probe_video

__all__ = ["FrameSize", "VideoFrames", "frame_part_names", "sample_frames"]

#: ``frame_size(n_sampled, height, width) -> (H, W)``: the output size of every frame of a video whose
#: displayed size is ``height`` x ``width`` and of which ``n_sampled`` frames are taken.
FrameSize = Callable[[int, int, int], tuple[int, int]]

# clockwise rotation -> the transpose that shows the frame upright
_UPRIGHT = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}


@dataclass(frozen=True)
class VideoFrames:
    """Outcome of :func:`sample_frames`.

    ``video`` is the probe result (status, reason, metadata, ``sampled_indices``); ``frames`` holds one
    encoded image per sampled index, in the same order, all ``width`` x ``height`` and upright. Rejects have
    no frames.
    """

    video: VideoResult
    frames: tuple[bytes, ...]
    ext: str | None
    width: int
    height: int

    @property
    def status(self) -> str:
        return self.video.status

    @property
    def reason(self) -> str | None:
        return self.video.reason


def frame_part_names(index: int, count: int, ext: str) -> list[str]:
    """Tar part names of the frames of media item ``index``: ``<index>.<k:04d>.<ext>``.

    Energon splits a member name at its first dot, so ``<key>.2.0007.jpg`` is part ``2.0007.jpg`` of sample
    ``<key>``; the zero-padded frame number keeps lexical order (tar listings, sorted part names) equal to
    frame order (presets sample at most 768 frames)."""
    return [f"{index}.{k:04d}.{ext}" for k in range(count)]


def sample_frames(
    data: bytes,
    *,
    choose_frames: Callable[[int, float], list[int]],
    frame_size: FrameSize,
    image_format: ImageFormat = "keep",
    jpeg_quality: int = 92,
    timeout_s: float = 60.0,
    max_frame_pixels: int = 100_000_000,
) -> VideoFrames:
    """Verify the video like :func:`probe_video` and return its sampled frames as encoded images.

    Each frame is decoded once, turned upright, resized with BICUBIC to ``frame_size(n, h, w)`` (displayed
    size) and encoded as ``image_format`` (``keep`` means JPEG). A ValueError from ``frame_size`` (e.g. a
    video too short or too elongated for the model) is a ``frame_selection`` reject. Never raises for bad
    input; the wall-clock limit covers decoding and encoding.
    """
    fmt: EncodeFormat = "jpeg" if image_format == "keep" else image_format
    encoder = _FrameEncoder(frame_size, fmt, jpeg_quality)
    video = probe_video(
        data,
        choose_frames=choose_frames,
        timeout_s=timeout_s,
        max_frame_pixels=max_frame_pixels,
        on_frame=encoder,
    )
    if encoder.size_error is not None and video.status != "ok":
        video = replace(video, reason=media_reason("frame_selection"), detail=encoder.size_error)
    if video.status != "ok":
        return VideoFrames(video=video, frames=(), ext=None, width=0, height=0)
    if len(encoder.encoded) != len(video.sampled_indices):  # pragma: no cover - one hook call per index
        raise RuntimeError(f"{len(encoder.encoded)} frames for {len(video.sampled_indices)} sampled indices")
    out_h, out_w = encoder.size or (0, 0)
    return VideoFrames(
        video=video, frames=tuple(encoder.encoded), ext=FMT_TO_EXT[fmt], width=out_w, height=out_h
    )


class _FrameSizeError(Exception):
    pass


class _FrameEncoder:
    """The frame hook of :func:`sample_frames`: each sampled frame turned upright, resized to the model's
    size (decided from the first frame) and encoded."""

    def __init__(self, frame_size: FrameSize, fmt: EncodeFormat, quality: int) -> None:
        self.frame_size = frame_size
        self.fmt: EncodeFormat = fmt
        self.quality = quality
        self.encoded: list[bytes] = []
        self.size: tuple[int, int] | None = None  # (height, width) of every output frame
        self.size_error: str | None = None  # why ``frame_size`` refused the video

    def __call__(self, sampled: SampledFrame) -> None:
        img = sampled.frame.to_image()
        if sampled.rotation in _UPRIGHT:
            img = img.transpose(_UPRIGHT[sampled.rotation])
        out_h, out_w = self._output_size(sampled.count, img)
        if img.size != (out_w, out_h):
            img = img.resize((out_w, out_h), Image.Resampling.BICUBIC)  # as the Qwen video processors
        self.encoded.append(encode_image(img, self.fmt, self.quality))

    def _output_size(self, count: int, img: Image.Image) -> tuple[int, int]:
        if self.size is None:
            try:
                self.size = self.frame_size(count, img.height, img.width)
            except ValueError as exc:
                self.size_error = f"{type(exc).__name__}: {exc}"
                raise _FrameSizeError from exc
        return self.size
