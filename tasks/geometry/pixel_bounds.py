"""The pixel bounds a run counts and resizes with: ``--max-pixels`` / ``--min-pixels`` over the preset's.

:meth:`PixelBounds.of` is the one place "no ``--max-pixels`` means the preset's" is decided; every function
below it (the families' image and video formulas, :func:`~.resize_rule.pipeline_size`, the tokens stage)
takes the resolved numbers as required parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schemas.config import TokenOptions
from ...schemas.presets import ModelPreset

__all__ = ["PixelBounds"]


@dataclass(frozen=True)
class PixelBounds:
    """Resolved pixel bounds of one run (frozen, hashable: a memo key)."""

    #: images: ``--min-pixels``, else the preset's (the processor's lower bound: an image kept in range may
    #: still round below it, so the token count needs it as much as the resize)
    image_min_pixels: int
    #: images: ``--max-pixels``, else the preset's (images above it are stored resized)
    image_max_pixels: int
    #: videos: each frame's pixel cap the token count puts under the preset's own video bounds. It is
    #: ``--max-pixels`` as given (Megatron-Bridge hands its ``max_pixels`` to the video processor too); None
    #: when it is not given, so videos keep the preset's video bounds alone (not its image ``max_pixels``)
    video_frame_cap: int | None

    @classmethod
    def of(cls, preset: ModelPreset, tokens: TokenOptions) -> PixelBounds:
        """The bounds of ``tokens``' knobs over ``preset``."""
        return cls(
            image_min_pixels=preset.min_pixels if tokens.min_pixels is None else tokens.min_pixels,
            image_max_pixels=preset.max_pixels if tokens.max_pixels is None else tokens.max_pixels,
            video_frame_cap=tokens.max_pixels,
        )
