"""The target model's geometry for one run: the preset with the knobs resolved once.

Every stage that sizes or counts media asks this object (the media stage for stored image and frame sizes
and the frames a video gives, the tokens stage for visual tokens, the gate for its pixel checks). Its pixel
bounds are :class:`~.pixel_bounds.PixelBounds` (where "no ``--max-pixels`` given means the preset's" is
decided, and nowhere else), and a family says how its images are resized
(:meth:`~.families.model_family.ModelFamily.stored_image_size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from ...schemas.config import MediaOptions, TokenOptions
from ...schemas.presets import ModelPreset
from .families import family_of
from .families.model_family import ImageTokens, ModelFamily, VideoTokens
from .frame_sampling import FramesMode
from .media_tokens import image_tokens, sample_video_frames, video_tokens
from .pixel_bounds import PixelBounds
from .preset_loading import load_preset

__all__ = ["ModelGeometry", "geometry_of"]


@dataclass(frozen=True)
class ModelGeometry:
    """The run's model geometry (frozen; hashable by identity of its preset)."""

    #: the preset as loaded (its own pixel bounds; the run's are ``bounds``)
    preset: ModelPreset
    #: the run's image bounds and video frame cap, resolved from the knobs once
    bounds: PixelBounds
    #: ``--video-max-pixels``: the cap of each frame ``--video-mode frames`` stores (None: the model's own
    #: frame size). Not the token count's frame cap (``bounds.video_frame_cap``, from ``--max-pixels``)
    stored_frame_cap: int | None
    max_num_frames: int | None
    frames_mode: FramesMode

    @classmethod
    def of(cls, preset: ModelPreset, tokens: TokenOptions, media: MediaOptions) -> ModelGeometry:
        return cls(
            preset=preset,
            bounds=PixelBounds.of(preset, tokens),
            stored_frame_cap=media.video_max_pixels,
            max_num_frames=tokens.max_num_frames,
            frames_mode=tokens.frames_mode,
        )

    @property
    def family(self) -> ModelFamily:
        return family_of(self.preset)

    @property
    def token_factor(self) -> int | None:
        """Pixels per visual-token side when the family resizes to a factor-aligned grid, else None."""
        return self.family.resize_factor(self.preset)

    def stored_image_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) an image outside the pixel bounds is stored at (ValueError when it cannot be)."""
        b = self.bounds
        return self.family.stored_image_size(
            self.preset, height, width, b.image_min_pixels, b.image_max_pixels
        )

    def choose_frames(self, n_frames: int, fps: float) -> list[int]:
        """Indices of the frames the model takes from an ``n_frames`` video at ``fps``, after
        ``--max-num-frames``."""
        return sample_video_frames(
            self.preset, n_frames, fps, max_num_frames=self.max_num_frames, mode=self.frames_mode
        )

    def frame_size(self, n_sampled: int, height: int, width: int) -> tuple[int, int]:
        """The per-frame size the model's video processor gives ``n_sampled`` frames of ``height`` x
        ``width`` (capped by ``--video-max-pixels``): frames stored at this size are left unchanged by the
        processor, so token counts of frames and of the video agree."""
        # the indices only feed Qwen3's timestamp text, never the size
        tokens = video_tokens(
            self.preset,
            n_sampled,
            height,
            width,
            indices=range(n_sampled),
            video_fps=1.0,
            frame_cap=self.stored_frame_cap,
        )
        return tokens.resized_height, tokens.resized_width

    def image_tokens(self, height: int, width: int, n_images: int = 1) -> ImageTokens:
        b = self.bounds
        return image_tokens(
            self.preset,
            height,
            width,
            min_pixels=b.image_min_pixels,
            max_pixels=b.image_max_pixels,
            n_images=n_images,
        )

    def video_tokens(
        self,
        n_sampled: int,
        height: int,
        width: int,
        *,
        indices: Sequence[int] | None = None,
        video_fps: float | None = None,
    ) -> VideoTokens:
        return video_tokens(
            self.preset,
            n_sampled,
            height,
            width,
            indices=indices,
            video_fps=video_fps,
            frame_cap=self.bounds.video_frame_cap,
        )


@lru_cache(maxsize=4)
def geometry_of(tokens: TokenOptions, media: MediaOptions) -> ModelGeometry:
    """The geometry of a run's model and knobs (its preset loaded once per process, its geometry made once
    per process and options)."""
    return ModelGeometry.of(_preset(tokens.model, tokens.model_dir), tokens, media)


@lru_cache(maxsize=4)
def _preset(model: str, model_dir: str | None) -> ModelPreset:
    return load_preset(model, model_dir)
