"""A kept video (``--video-mode keep``) as the frames the run counted, for formats that store frames.

The ``bridge`` format stores a video as its frame images. A run in frames mode has them already (the media
stage wrote them once, upright, at the model's frame size). A run that kept the video file has the file
and the manifest's ``frame_indices``: :func:`kept_video_frames` decodes exactly those frames at publish time
with the media stage's own decoder (:func:`vlmforge.tasks.media.frames.sample_frames`: same verification,
upright, JPEG), at the video's displayed size. Not resized: keep-mode token counts are the model
processor's resize of the stored frames, which the trainer's processor then applies to these frames too.
The media stage verified these bytes; a failure here is an error, never a silent drop.
"""

from __future__ import annotations

from ...media import sample_frames

__all__ = ["kept_video_frames"]


def kept_video_frames(data: bytes, frame_indices: list[int], what: str) -> list[bytes]:
    """The frames ``frame_indices`` of the video ``data``, upright, each a JPEG at the displayed size."""
    if not frame_indices:
        raise ValueError(f"{what}: a kept video without frame_indices cannot become frames")
    wanted = [int(i) for i in frame_indices]
    result = sample_frames(
        data,
        choose_frames=lambda _n_frames, _fps: list(wanted),
        frame_size=lambda _n, height, width: (height, width),
        image_format="jpeg",
    )
    if result.status != "ok" or list(result.video.sampled_indices) != wanted:
        raise ValueError(f"{what}: the kept video's frames {wanted} did not decode ({result.reason})")
    return list(result.frames)
