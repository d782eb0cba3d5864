"""Model presets: the vision/tokenizer parameters that decide exact per-sample token counts.

Presets are data (``schemas/presets/<name>.yaml``, shipped as package data); this module only validates them.
See /work/shared/reference/visual-tokens.md §2 for where every number comes from.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ModelPreset", "list_presets", "load_preset"]


class ModelPreset(BaseModel):
    """Vision + text parameters of one target model family."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    family: Literal["qwen"]
    patch_size: int = Field(gt=0)
    merge_size: int = Field(gt=0)
    temporal_patch_size: int = Field(gt=0)
    # image resize bounds (smart_resize min_pixels / max_pixels)
    min_pixels: int = Field(gt=0)
    max_pixels: int = Field(gt=0)
    # video resize bounds: per frame for the qwen-vl-utils sampler, over all frames (T*H*W) for qwen3
    video_min_pixels: int = Field(gt=0)
    video_max_pixels: int = Field(gt=0)
    # qwen-vl-utils total pixel budget over all frames (MODEL_SEQ_LEN * factor**2 * 0.9); None = none
    video_total_pixels: int | None = Field(default=None, gt=0)
    fps: float = Field(default=2.0, gt=0)
    min_frames: int = Field(gt=0)
    max_frames: int = Field(gt=0)
    video_sampler: Literal["qwen_vl_utils", "qwen3"]
    # Qwen3-VL: "<t seconds>" text before every temporal group of a video
    timestamps: bool = False
    # Qwen2/2.5-VL insert this system message when the first message is not a system message; Qwen3-VL: None
    default_system: str | None = None
    # "qwen2" = built-in exact Qwen vocabulary (qwen.tiktoken); anything else = path to a tokenizer.json
    tokenizer: str = "qwen2"
    aspect_ratio_limit: float = Field(default=200, gt=1)

    @model_validator(mode="after")
    def _check_bounds(self) -> ModelPreset:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels {self.min_pixels} > max_pixels {self.max_pixels}")
        if self.video_min_pixels > self.video_max_pixels:
            raise ValueError(
                f"video_min_pixels {self.video_min_pixels} > video_max_pixels {self.video_max_pixels}"
            )
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames {self.min_frames} > max_frames {self.max_frames}")
        return self

    @property
    def factor(self) -> int:
        """Resize alignment in pixels: one merged visual token covers factor x factor pixels."""
        return self.patch_size * self.merge_size


def _preset_dir() -> Any:
    return resources.files("vlmforge.schemas").joinpath("presets")


def list_presets() -> list[str]:
    """Names of the presets shipped with the package, sorted."""
    return sorted(
        entry.name.removesuffix(".yaml") for entry in _preset_dir().iterdir() if entry.name.endswith(".yaml")
    )


def load_preset(name: str, **overrides: Any) -> ModelPreset:
    """Load ``schemas/presets/<name>.yaml``; keyword overrides replace single fields (validated)."""
    known = list_presets()
    if name not in known:
        raise ValueError(f"unknown model preset {name!r}; known presets: {', '.join(known)}")
    data = yaml.safe_load(_preset_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"preset file {name}.yaml does not hold a mapping")
    data.update(overrides)
    return ModelPreset.model_validate(data)
