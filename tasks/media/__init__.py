from __future__ import annotations

from .formats import accepted_image_formats
from .frames import frame_part_names, sample_frames
from .image import process_image
from .sniff import image_magic
from .trainer_decode import PART_CHECKS, part_problem
from .video import VideoResult, display_rotation, probe_video

__all__ = [
    "PART_CHECKS",
    "VideoResult",
    "accepted_image_formats",
    "display_rotation",
    "frame_part_names",
    "image_magic",
    "part_problem",
    "probe_video",
    "process_image",
    "sample_frames",
]
