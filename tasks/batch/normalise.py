"""Verifying, normalising and storing one media object's bytes, and recording the outcome in its media row.

An image is verified and resized to what the model's processor would make of it; a video is kept as is
(``--video-mode keep``: decoded at training time, only its sampled frames verified) or turned into its
sampled frames at the model's frame size (``--video-mode frames``). Which of the three applies is a lookup
in :attr:`Normaliser.by_kind`. The outcome carries what token counting needs: an image's stored size or a
video's sampled frames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from ...schemas.config import MediaOptions, TokenOptions
from ...schemas.reasons import reason
from ...schemas.rows import MediaRow
from ..geometry import ModelGeometry, VideoSpec
from ..media import (
    VideoResult,
    accepted_image_formats,
    probe_video,
    process_image,
    sample_frames,
)
from ..storage import ContentStore
from ..tokens import FEED_PATHS

VIDEO_EXTS = {"mp4", "mov", "webm", "mkv", "avi"}


@dataclass
class MediaOutcome:
    """One reference's media row, and what the sample needs from it: why it fails the sample (None: ok),
    the stored (height, width) of an image, the sampled frames of a video."""

    row: MediaRow
    sample_reason: str | None = None
    out_hw: tuple[int, int] | None = None
    video: VideoSpec | None = None

    @property
    def ok(self) -> bool:
        return self.sample_reason is None


def rejected(row: MediaRow, row_reason: str, sample_reason: str) -> MediaOutcome:
    """The one way a reference fails: its row says why, and so does the sample that uses it."""
    row.status, row.reason = "rejected", row_reason
    return MediaOutcome(row, sample_reason)


def _media_failure(row: MediaRow, code: str | None, detail: str | None) -> MediaOutcome:
    """A verification reject: ``code: detail`` in the media row (the form of every reason, so ``code_of``
    reads it), ``media_error: <ref>: <code>`` for the sample."""
    return rejected(row, reason(str(code), detail), reason("media_error", f"{row.ref}: {code}"))


class MediaSettings(Protocol):
    """What the normaliser reads of a run: the media options, and the feed path (whether stored images are
    aligned to the model's grid). The batch stage's ``BatchWork`` has both, and so has a ``RunConfig`` (the
    estimate's disk sampler normalises as a run would, from its config)."""

    @property
    def media(self) -> MediaOptions: ...

    @property
    def tokens(self) -> TokenOptions: ...


class _Normalise(Protocol):
    def __call__(self, row: MediaRow, data: bytes) -> MediaOutcome: ...


class Normaliser:
    """Turns a reference's bytes into stored media (cached nothing: the media step caches per reference)."""

    def __init__(self, settings: MediaSettings, geometry: ModelGeometry, store: ContentStore) -> None:
        self.options, self.geometry, self.store = settings.media, geometry, store
        self.align_to_grid = FEED_PATHS[settings.tokens.feed_path].align_images
        self.accepted_formats = accepted_image_formats(self.options.extra_image_formats)
        videos: dict[str, _Normalise] = {"keep": self.video_kept, "frames": self.video_frames}
        self.by_kind: dict[str, _Normalise] = {"image": self.image, "video": videos[self.options.video_mode]}

    def __call__(self, row: MediaRow, data: bytes) -> MediaOutcome:
        return self.by_kind[row.kind](row, data)

    def image(self, row: MediaRow, data: bytes) -> MediaOutcome:
        res = process_image(
            data,
            target_size=self.geometry.stored_image_size,
            max_pixels=self.geometry.bounds.image_max_pixels,
            max_image_pixels=self.options.max_image_pixels,
            image_format=self.options.image_format,
            min_pixels=self.geometry.bounds.image_min_pixels,
            min_side=self.options.min_image_side,
            accepted_formats=self.accepted_formats,
            align_to_grid=self.align_to_grid,
        )
        row.format, row.width, row.height, row.notes = res.format, res.width, res.height, ",".join(res.notes)
        if res.status != "ok" or res.out_bytes is None:
            return _media_failure(row, res.reason, res.detail)
        # a kept original is stored under the upstream hash; a re-encoded image under its own
        out_sha = self.store.put(res.out_bytes, row.sha256 if res.kept_original else None)
        row.out_sha256, row.out_bytes, row.out_ext = out_sha, len(res.out_bytes), res.out_ext
        row.out_width, row.out_height, row.kept_original = res.out_width, res.out_height, res.kept_original
        row.n_frames = res.n_frames
        return MediaOutcome(row, out_hw=(res.out_height, res.out_width))

    def video_kept(self, row: MediaRow, data: bytes) -> MediaOutcome:
        """``--video-mode keep``: the video bytes go to the shard; only the sampled frames are decoded."""
        res = probe_video(
            data, choose_frames=self.geometry.choose_frames, timeout_s=self.options.video_timeout_s
        )
        _record_probe(row, res)
        if res.status != "ok":
            return _media_failure(row, res.reason, res.detail)
        ext = row.ref.rsplit(".", 1)[-1].lower() if "." in row.ref else "mp4"
        row.out_sha256, row.out_bytes = self.store.put(data, row.sha256), len(data)
        row.out_ext = ext if ext in VIDEO_EXTS else "mp4"
        row.out_width, row.out_height, row.kept_original = res.width, res.height, True
        row.sampled_frames, row.frame_indices = len(res.sampled_indices), list(res.sampled_indices)
        row.n_frames = row.sampled_frames
        # Decoders hand training the frames as stored (rotation is metadata), so tokens use the stored size.
        stored_h, stored_w = (res.width, res.height) if res.rotation in (90, 270) else (res.height, res.width)
        return MediaOutcome(row, video=_video_spec(res, len(res.sampled_indices), stored_h, stored_w))

    def video_frames(self, row: MediaRow, data: bytes) -> MediaOutcome:
        """``--video-mode frames``: the sampled frames, upright, at the model's frame size, stored as images;
        training reads them as they are (no video decode, no resize)."""
        fmt = "jpeg" if self.options.image_format == "keep" else self.options.image_format
        vf = sample_frames(
            data,
            choose_frames=self.geometry.choose_frames,
            frame_size=self.geometry.frame_size,
            image_format=fmt,
            timeout_s=self.options.video_timeout_s,
        )
        _record_probe(row, vf.video)
        if vf.status != "ok" or vf.ext is None:
            return _media_failure(row, vf.video.reason, vf.video.detail)
        shas = [self.store.put(frame) for frame in vf.frames]
        # The frame list is itself a stored object, so out_sha256 names one thing like every other row.
        row.out_sha256 = self.store.put(json.dumps(shas, separators=(",", ":")).encode())
        row.out_bytes, row.out_ext = sum(len(f) for f in vf.frames), vf.ext
        row.out_width, row.out_height, row.kept_original = vf.width, vf.height, False
        row.sampled_frames, row.frame_indices = len(vf.frames), list(vf.video.sampled_indices)
        row.n_frames = row.sampled_frames
        row.frame_sha256, row.frame_bytes = shas, [len(f) for f in vf.frames]
        return MediaOutcome(row, video=_video_spec(vf.video, len(vf.frames), vf.height, vf.width))


def _record_probe(row: MediaRow, res: VideoResult) -> None:
    """The upstream video as probed (set in both video modes, rejected or not)."""
    row.format, row.width, row.height = res.codec, res.width, res.height
    row.frames, row.fps = res.frames, res.fps


def _video_spec(res: VideoResult, n_frames: int, height: int, width: int) -> VideoSpec:
    """What token counting needs of a video: its sampled frames and the size training sees them at."""
    return VideoSpec(
        n_sampled_frames=n_frames,
        height=height,
        width=width,
        indices=list(res.sampled_indices),
        video_fps=res.fps,
    )
