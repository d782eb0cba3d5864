"""Visual tokens of media given by their sizes alone (no files), as one sample of the run's model: the table
``vlmforge tokens`` prints. Every number is the run's :class:`~vlmforge.tasks.geometry.ModelGeometry`'s
(its frame sampler, its pixel bounds), so the table counts what a run with the same knobs counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..geometry import ModelGeometry

__all__ = ["ImageSize", "MediaTokens", "VideoSize", "media_tokens"]


@dataclass(frozen=True)
class ImageSize:
    width: int
    height: int


@dataclass(frozen=True)
class VideoSize:
    width: int
    height: int
    frames: int
    fps: float


@dataclass(frozen=True)
class MediaTokens:
    """One image or video of the sample."""

    kind: Literal["image", "video"]
    #: as given: ``WIDTHxHEIGHT``, a video ``WIDTHxHEIGHT:FRAMES@FPS``
    size: str
    #: ``WIDTHxHEIGHT`` the model sees (Qwen the resize grid, tiled models the tile grid, LLaVA the pinpoint)
    seen: str
    #: images: tiles or anyres views, thumbnail or base image included (videos: None)
    tiles: int | None
    #: videos: the frames the model's sampler takes, after ``--max-num-frames`` (images: None)
    frames: int | None
    tokens: int


def media_tokens(
    geometry: ModelGeometry, images: Sequence[ImageSize], videos: Sequence[VideoSize]
) -> list[MediaTokens]:
    """The images' then the videos' visual tokens, the images counted as ``len(images)`` of one sample (a
    tiled model may split its tile budget among them). ValueError for a size or video the model cannot take
    (aspect ratio over its limit, too few frames, no video input)."""
    rows = []
    for im in images:
        r = geometry.image_tokens(im.height, im.width, len(images))
        rows.append(
            MediaTokens(
                "image",
                f"{im.width}x{im.height}",
                f"{r.resized_width}x{r.resized_height}",
                r.tiles,
                None,
                r.tokens,
            )
        )
    for v in videos:
        idx = geometry.choose_frames(v.frames, v.fps)
        t = geometry.video_tokens(len(idx), v.height, v.width, indices=idx, video_fps=v.fps)
        size = f"{v.width}x{v.height}:{v.frames}@{v.fps:g}"
        rows.append(
            MediaTokens("video", size, f"{t.resized_width}x{t.resized_height}", None, len(idx), t.tokens)
        )
    return rows
