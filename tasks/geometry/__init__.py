from __future__ import annotations

from .families import family_of
from .families.model_family import ExpandedText, VideoSpec
from .families.qwen import VIDEO_PAD, VIDEO_PLACEHOLDER, visual_spans
from .families.qwen_video import qvu_smart_resize, timestamp_text, video_timestamps
from .frame_sampling import np_linspace_round
from .media_tokens import image_tokens, sample_video_frames, video_tokens
from .model_geometry import ModelGeometry, geometry_of
from .pixel_bounds import PixelBounds
from .preset_loading import load_preset
from .resize_rule import smart_resize

__all__ = [
    "ExpandedText",
    "ModelGeometry",
    "PixelBounds",
    "VIDEO_PAD",
    "VIDEO_PLACEHOLDER",
    "VideoSpec",
    "family_of",
    "geometry_of",
    "image_tokens",
    "load_preset",
    "np_linspace_round",
    "qvu_smart_resize",
    "sample_video_frames",
    "smart_resize",
    "timestamp_text",
    "video_timestamps",
    "video_tokens",
    "visual_spans",
]
