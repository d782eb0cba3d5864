"""The one definition of "this media decodes as the trainer will decode it".

A trainer's loader opens an image with Pillow and reads every pixel (``Image.open`` then ``load()``: what
webdataset's image handler and Megatron-Bridge's do), and decodes the sampled frames of a video with PyAV
(libav). The media stage (for original bytes kept byte-identical), the run's read-back and
``vlmforge validate`` all ask the functions here, so they cannot disagree on a file:

- :func:`image_problem`: Pillow's full decode of exactly the bytes given, with Pillow's own limits;
- :func:`video_problem`: :func:`~.video.probe_video` with the recorded frame indices (the container must be
  an accepted video container, and each sampled frame must decode);
- :func:`part_problem`: either, chosen by a published part's extension (a registry, :data:`PART_CHECKS`).

Each returns None when the media decodes, else the :class:`~.rejects.Reject` saying why. Pure functions over
bytes; PyAV is imported on first use.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Collection, Sequence

from PIL import Image

from .decode import classify_decode_error
from .formats import ACCEPTED_IMAGE_FORMATS, openable
from .rejects import Reject
from .video import probe_video

__all__ = [
    "IMAGE_PART_EXTS",
    "PART_CHECKS",
    "VIDEO_PART_EXTS",
    "frame_count",
    "image_problem",
    "part_problem",
    "video_problem",
]

#: Extensions of published image parts (what Energon's and Bridge's loaders decode with Pillow).
IMAGE_PART_EXTS = frozenset({"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm"})
#: Extensions of published video parts (decoded with PyAV at training time).
VIDEO_PART_EXTS = frozenset({"mp4", "mov", "webm", "mkv", "avi", "flv"})


def image_problem(data: bytes, accepted: Collection[str] = ACCEPTED_IMAGE_FORMATS) -> Reject | None:
    """None when Pillow opens ``data`` (as one of the ``accepted`` formats) and decodes every pixel."""
    try:
        with Image.open(io.BytesIO(data), formats=openable(accepted)) as img:
            img.load()
    except Exception as exc:
        return classify_decode_error(exc)
    return None


def video_problem(data: bytes, frame_indices: Sequence[int] | None, timeout_s: float = 60.0) -> Reject | None:
    """None when ``data`` is an accepted video whose frames ``frame_indices`` (the first frame when None or
    empty) all decode with PyAV."""
    wanted = [int(i) for i in frame_indices or ()]

    def chosen(n_frames: int, fps: float) -> list[int]:
        return wanted

    res = probe_video(data, choose_frames=chosen, timeout_s=timeout_s)
    if res.status == "ok" or res.reason is None:
        return None
    return Reject(res.reason, res.detail)


def _image_part(data: bytes, frame_indices: Sequence[int] | None) -> Reject | None:
    return image_problem(data)


#: How a published part is decoded at training time, by extension.
PART_CHECKS: dict[str, Callable[[bytes, Sequence[int] | None], Reject | None]] = {
    **{ext: _image_part for ext in IMAGE_PART_EXTS},
    **{ext: video_problem for ext in VIDEO_PART_EXTS},
}


def part_problem(name: str, data: bytes, frame_indices: Sequence[int] | None = None) -> Reject | None:
    """The problem of published part ``name`` (``<n>.<ext>``, ``<n>.<k>.<ext>``), decoded by its extension
    as the trainer decodes it; None for a part that decodes or is not media (json, ...)."""
    check = PART_CHECKS.get(name.rsplit(".", 1)[-1].lower())
    return None if check is None else check(data, frame_indices)


def frame_count(data: bytes, accepted: Collection[str] = ACCEPTED_IMAGE_FORMATS) -> int:
    """Frames or pages of an image as Pillow counts them (1 when it cannot tell); only the first is used."""
    try:
        with Image.open(io.BytesIO(data), formats=openable(accepted)) as img:
            return max(1, int(getattr(img, "n_frames", 1)))
    except Exception:
        return 1
