"""Model presets: the vision/tokenizer parameters that decide exact per-sample token counts.

Presets are data (``schemas/presets/<name>.yaml``, shipped as package data); this module validates their
shape. Each family (``tasks/geometry/families/``, the one family registry) says what its presets must set,
what it reads from a local model folder and its token formulas; ``tasks/geometry`` loads a preset
(``load_preset``) and checks it against its family. Where the numbers come from: ``docs/visual-tokens.md``.

* ``qwen`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): smart_resize grid; the flat fields below.
* ``internvl`` / ``nemotron_vl``: dynamic tiling (``tiling``) + the ``text`` wrappers around each tile group.
* ``llava`` (LLaVA-1.5, LLaVA-NeXT anyres): ``anyres`` + ``text``; a Jinja ``chat_template`` is required.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = [
    "AnyresSpec",
    "ModelPreset",
    "TextSpec",
    "TilingSpec",
    "list_presets",
    "merge_preset",
    "preset_data",
]


class TilingSpec(BaseModel):
    """InternVL / Nemotron VL dynamic tiling: the image is resized to ``cols x rows`` tiles of
    ``tile_size``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tile_size: int = Field(gt=0)  # 448 (InternVL) / 512 (Nemotron VL)
    min_tiles: int = Field(default=1, ge=1)
    max_tiles: int = Field(default=12, ge=1)
    thumbnail: bool = True  # + one whole-image tile when the grid has more than one tile
    # closest: InternVL find_closest_aspect_ratio; area_weighted: Megatron-LM / Llama-Nemotron-Nano-VL
    ratio: Literal["closest", "area_weighted"] = "closest"
    tokens_per_tile: int = Field(default=256, gt=0)  # (tile / patch)^2 * downsample_ratio^2
    # per_image: every image may use max_tiles (HF / vLLM processors); split: InternVL finetune code,
    # max(1, max_tiles // n_images) per image of a multi-image sample
    multi_image: Literal["per_image", "split"] = "per_image"

    @model_validator(mode="after")
    def _check(self) -> TilingSpec:
        if self.min_tiles > self.max_tiles:
            raise ValueError(f"tiling.min_tiles {self.min_tiles} > tiling.max_tiles {self.max_tiles}")
        return self


class AnyresSpec(BaseModel):
    """LLaVA-1.5 (no pinpoints: one fixed view) and LLaVA-NeXT anyres (transformers LlavaNextProcessor)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_size: int = Field(default=336, gt=0)  # CLIP input (crop) size
    vision_patch_size: int = Field(default=14, gt=0)
    # (height, width) pairs; empty = LLaVA-1.5: (image_size / patch)^2 features for every image
    grid_pinpoints: tuple[tuple[int, int], ...] = ()
    num_additional_image_tokens: int = Field(default=1, ge=0)  # the CLS token
    feature_select: Literal["default", "full"] = "default"  # "default" drops the CLS feature (-1)


class TextSpec(BaseModel):
    """How a non-Qwen model writes media into its token sequence.

    The chat template writes ``image_placeholder`` (+ ``image_suffix`` for the built-in ChatML renderer) per
    image part; the processor replaces it by ``image_start + image_pad * N + image_end``. A video becomes one
    such block per sampled frame, each preceded by ``video_frame`` (``{i}`` = 1-based frame number, ``{t}`` =
    its time in seconds) and joined by ``video_frame_sep``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    image_placeholder: str = Field(min_length=1)
    image_suffix: str = ""
    video_placeholder: str = "<video>"
    video_suffix: str = ""
    image_start: str = ""
    image_pad: str = Field(min_length=1)  # one token, repeated once per visual token
    image_end: str = ""
    video_frame: str = ""
    video_frame_sep: str = "\n"
    add_bos: bool = False  # the tokenizer prepends BOS (Llama / Vicuna / Mistral tokenizers)
    bos_token: str = "<s>"


class ModelPreset(BaseModel):
    """Vision + text parameters of one target model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    family: str  # a key of the family registry (tasks/geometry/families), checked where presets are loaded
    patch_size: int = Field(gt=0)
    merge_size: int = Field(gt=0)
    temporal_patch_size: int = Field(gt=0)
    # image resize bounds (smart_resize min_pixels / max_pixels); other families: the pipeline's resize cap
    min_pixels: int = Field(gt=0)
    max_pixels: int = Field(gt=0)
    # Qwen video resize bounds: per frame for the qwen-vl-utils sampler, over all frames (T*H*W) for qwen3
    video_min_pixels: int | None = Field(default=None, gt=0)
    video_max_pixels: int | None = Field(default=None, gt=0)
    # qwen-vl-utils total pixel budget over all frames (MODEL_SEQ_LEN * factor**2 * 0.9); None = none
    video_total_pixels: int | None = Field(default=None, gt=0)
    fps: float = Field(default=2.0, gt=0)
    min_frames: int = Field(default=1, gt=0)
    max_frames: int = Field(gt=0)
    # uniform: linspace(0, T - 1, min(max_frames, T)) rounded (Megatron-LM / InternVL budget, 1 tile a frame)
    video_sampler: Literal["qwen_vl_utils", "qwen3", "uniform", "none"]
    # Qwen3-VL: "<t seconds>" text before every temporal group of a video
    timestamps: bool = False
    # Inserted as a system message when the first message is not a system message (Qwen2/2.5-VL, InternVL)
    default_system: str | None = None
    # "qwen2" = built-in exact Qwen vocabulary (qwen.tiktoken); a path = a tokenizer.json or a model folder;
    # None = no redistributable vocabulary: text counts need --tokenizer
    tokenizer: str | None = "qwen2"
    # single tokens of the built-in vocabulary (None: the Qwen2-VL / Qwen3 list, see tasks/tokens/text.py)
    special_tokens: tuple[str, ...] | None = None
    # a Jinja chat template (transformers semantics); None = the family's built-in ChatML renderer
    chat_template: str | None = None
    aspect_ratio_limit: float = Field(default=200, gt=1)
    tiling: TilingSpec | None = None
    anyres: AnyresSpec | None = None
    text: TextSpec | None = None

    @field_validator("family")
    @classmethod
    def _known_family(cls, family: str, info: ValidationInfo) -> str:
        # the loader passes the family registry's names (schemas know no family by name)
        known = (info.context or {}).get("families")
        if known is not None and family not in known:
            raise ValueError(f"unknown model family {family!r}; known: {', '.join(known)}")
        return family

    @model_validator(mode="after")
    def _check_bounds(self, info: ValidationInfo) -> ModelPreset:
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels {self.min_pixels} > max_pixels {self.max_pixels}")
        if (
            self.video_min_pixels is not None
            and self.video_max_pixels is not None
            and self.video_min_pixels > self.video_max_pixels
        ):
            raise ValueError(
                f"video_min_pixels {self.video_min_pixels} > video_max_pixels {self.video_max_pixels}"
            )
        if self.min_frames > self.max_frames:
            raise ValueError(f"min_frames {self.min_frames} > max_frames {self.max_frames}")
        family_check = (info.context or {}).get("family_check")
        if family_check is not None:  # what the preset's family requires of it (tasks/geometry/families)
            family_check(self)
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


def preset_data(name: str) -> dict[str, Any]:
    """The mapping of ``schemas/presets/<name>.yaml`` (ValueError naming the known presets otherwise)."""
    known = list_presets()
    if name not in known:
        raise ValueError(f"unknown model preset {name!r}; known presets: {', '.join(known)}")
    data = yaml.safe_load(_preset_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"preset file {name}.yaml does not hold a mapping")
    return data


def merge_preset(data: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Overlay ``overrides`` on preset ``data`` in place; nested sections merge key by key."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
