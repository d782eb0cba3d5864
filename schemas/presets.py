"""Model presets: the vision/tokenizer parameters that decide exact per-sample token counts.

Presets are data (``schemas/presets/<name>.yaml``, shipped as package data); this module only validates them
and overlays a local model folder's own config files on them (:func:`load_preset` with ``model_dir``).
See /work/shared/reference/visual-tokens.md for where every number comes from.

Families (:data:`FAMILY_RULES`: what each one's presets must set and which model-folder files it reads; the
token formulas are in ``tasks/tokens/families/``):

* ``qwen`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): smart_resize grid; the flat fields below.
* ``internvl`` / ``nemotron_vl``: dynamic tiling (``tiling``) + the ``text`` wrappers around each tile group.
* ``llava`` (LLaVA-1.5, LLaVA-NeXT anyres): ``anyres`` + ``text``; a Jinja ``chat_template`` is required.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "FAMILY_RULES",
    "AnyresSpec",
    "FamilyRules",
    "ModelPreset",
    "TextSpec",
    "TilingSpec",
    "list_presets",
    "load_preset",
    "model_dir_overrides",
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
    family: str  # a key of FAMILY_RULES
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
    def _known_family(cls, family: str) -> str:
        if family not in FAMILY_RULES:
            raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILY_RULES)}")
        return family

    @model_validator(mode="after")
    def _check_bounds(self) -> ModelPreset:
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
        FAMILY_RULES[self.family].check(self)
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


def load_preset(name: str, model_dir: str | Path | None = None, **overrides: Any) -> ModelPreset:
    """Load ``schemas/presets/<name>.yaml``.

    ``model_dir`` (a local model folder) overlays what its own files say (:func:`model_dir_overrides`);
    keyword overrides then replace single fields (validated). Nested sections merge key by key.
    """
    known = list_presets()
    if name not in known:
        raise ValueError(f"unknown model preset {name!r}; known presets: {', '.join(known)}")
    data = yaml.safe_load(_preset_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"preset file {name}.yaml does not hold a mapping")
    if model_dir is not None:
        _merge(data, model_dir_overrides(data, Path(model_dir)))
    _merge(data, overrides)
    return ModelPreset.model_validate(data)


def _merge(data: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from exc
    return doc if isinstance(doc, dict) else {}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _chat_template(folder: Path) -> str | None:
    """The model's own chat template: chat_template.jinja, chat_template.json, then tokenizer_config.json."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json", "tokenizer_config.json"):
        tpl = _read_json(folder / name).get("chat_template")
        if isinstance(tpl, str):
            return tpl
        if isinstance(tpl, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
            chosen = named.get("default") or next(iter(named.values()), None)
            if isinstance(chosen, str):
                return chosen
    return None


@dataclass(frozen=True)
class ModelFiles:
    """The JSON config files of a local model folder, each ``{}`` when absent."""

    preprocessor: dict[str, Any]  # preprocessor_config.json
    video_preprocessor: dict[str, Any]  # video_preprocessor_config.json
    processor: dict[str, Any]  # processor_config.json
    config: dict[str, Any]  # config.json
    tokenizer_config: dict[str, Any]  # tokenizer_config.json

    @classmethod
    def read(cls, folder: Path) -> ModelFiles:
        return cls(
            _read_json(folder / "preprocessor_config.json"),
            _read_json(folder / "video_preprocessor_config.json"),
            _read_json(folder / "processor_config.json"),
            _read_json(folder / "config.json"),
            _read_json(folder / "tokenizer_config.json"),
        )


def model_dir_overrides(base: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Preset fields a local model folder overrides: what its family reads from ``preprocessor_config.json``,
    ``video_preprocessor_config.json``, ``processor_config.json`` and ``config.json``
    (:attr:`FamilyRules.read_folder`), then the chat template, ``tokenizer.json`` and the BOS settings of
    ``tokenizer_config.json``. Only keys the files actually carry are returned."""
    if not folder.is_dir():
        raise ValueError(f"model folder {str(folder)!r} does not exist")
    files = ModelFiles.read(folder)
    family = base.get("family")
    rules = FAMILY_RULES.get(family) if isinstance(family, str) else None
    out = rules.read_folder(base, files) if rules is not None else {}
    template = _chat_template(folder)
    if template is not None:
        out["chat_template"] = template
    if (folder / "tokenizer.json").is_file():
        out["tokenizer"] = str((folder / "tokenizer.json").resolve())
    if isinstance(base.get("text"), dict):
        text = _bos_overrides(files.tokenizer_config)
        if text:
            out["text"] = {**out.get("text", {}), **text}
    return out


def _bos_overrides(tok_cfg: dict[str, Any]) -> dict[str, Any]:
    text: dict[str, Any] = {}
    bos = tok_cfg.get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    if isinstance(bos, str):
        text["bos_token"] = bos
    if isinstance(tok_cfg.get("add_bos_token"), bool):
        text["add_bos"] = tok_cfg["add_bos_token"]
    return text


# --------------------------------------------------------------------------------------------------
# Model folders, per family
# --------------------------------------------------------------------------------------------------


def _qwen_folder(base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
    """Qwen2VLImageProcessor's patch sizes and pixel bounds; for qwen3 also the video processor's."""
    pre, vid = files.preprocessor, files.video_preprocessor
    size = _dict(pre.get("size"))
    out: dict[str, Any] = {}
    for key in ("patch_size", "merge_size", "temporal_patch_size"):
        if isinstance(pre.get(key), int):
            out[key] = pre[key]
    lo = pre.get("min_pixels", size.get("shortest_edge"))
    hi = pre.get("max_pixels", size.get("longest_edge"))
    if isinstance(lo, int):
        out["min_pixels"] = lo
    if isinstance(hi, int):
        out["max_pixels"] = hi
    if base.get("video_sampler") == "qwen3":  # transformers' Qwen3 video processor reads its config
        vsize = _dict(vid.get("size"))
        if isinstance(vsize.get("shortest_edge"), int):
            out["video_min_pixels"] = vsize["shortest_edge"]
        if isinstance(vsize.get("longest_edge"), int):
            out["video_max_pixels"] = vsize["longest_edge"]
        for key in ("fps", "min_frames", "max_frames"):
            if isinstance(vid.get(key), int | float) and not isinstance(vid.get(key), bool):
                out[key] = vid[key]
    return out


def _tiled_folder(base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
    """InternVL / Nemotron ``config.json`` tiling keys (or the HF processor's), tokens per tile, and the
    HF-format InternVL's own media tokens."""
    pre, proc, cfg, tok_cfg = files.preprocessor, files.processor, files.config, files.tokenizer_config
    out: dict[str, Any] = {}
    tiling: dict[str, Any] = {}
    vision = _dict(cfg.get("vision_config"))
    tile = cfg.get("force_image_size", _dict(pre.get("size")).get("height"))
    if isinstance(tile, int):
        tiling["tile_size"] = tile
    for src, dst in (
        ("max_dynamic_patch", "max_tiles"),
        ("min_dynamic_patch", "min_tiles"),
        ("use_thumbnail", "thumbnail"),
    ):
        if src in cfg:
            tiling[dst] = cfg[src]
    for src, dst in (("max_patches", "max_tiles"), ("min_patches", "min_tiles")):
        if isinstance(pre.get(src), int):
            tiling[dst] = pre[src]
    if pre.get("crop_to_patches") is False:
        tiling["max_tiles"] = tiling["min_tiles"] = 1
    patch = vision.get("patch_size")
    ratio = cfg.get("downsample_ratio")
    if isinstance(tile, int) and isinstance(patch, int) and isinstance(ratio, int | float):
        tiling["tokens_per_tile"] = int((tile // patch) ** 2 * ratio**2)
    if isinstance(proc.get("image_seq_length"), int):
        tiling["tokens_per_tile"] = proc["image_seq_length"]
    ctx = tok_cfg.get("context_image_token")
    if isinstance(ctx, str):  # HF-format InternVL (InternVLProcessor): its own tokens and frame labels
        tiling["multi_image"] = "per_image"
        out["text"] = {
            "image_placeholder": ctx,
            "image_suffix": "",
            "image_pad": ctx,
            "image_start": str(tok_cfg.get("start_image_token", "<img>")),
            "image_end": str(tok_cfg.get("end_image_token", "</img>")),
            "video_placeholder": str(tok_cfg.get("video_token", "<video>")),
            "video_suffix": "",
            "video_frame": "Frame{i}: ",
            "video_frame_sep": "\n",
        }
    if tiling:
        out["tiling"] = tiling
    return out


def _llava_folder(base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
    """LlavaNextImageProcessor's crop size and pinpoints, LlavaNextProcessor's feature settings."""
    pre, proc = files.preprocessor, files.processor
    anyres: dict[str, Any] = {}
    side = _dict(pre.get("crop_size")).get("height", _dict(pre.get("size")).get("shortest_edge"))
    if isinstance(side, int):
        anyres["image_size"] = side
    pins = pre.get("image_grid_pinpoints")
    if isinstance(pins, list):
        anyres["grid_pinpoints"] = [tuple(p) for p in pins]
    for src, dst in (
        ("patch_size", "vision_patch_size"),
        ("num_additional_image_tokens", "num_additional_image_tokens"),
        ("vision_feature_select_strategy", "feature_select"),
    ):
        if src in proc and proc[src] is not None:
            anyres[dst] = proc[src]
    return {"anyres": anyres} if anyres else {}


# --------------------------------------------------------------------------------------------------
# The family table
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyRules:
    """What a preset of one family must set, and what it reads from a local model folder."""

    # (field, what it is): fields that must not be None
    requires: tuple[tuple[str, str], ...]
    read_folder: Callable[[dict[str, Any], ModelFiles], dict[str, Any]]
    video_samplers: tuple[str, ...] | None = None  # the video samplers it takes (None: any)
    timestamps: bool = False  # whether the family can write per-group timestamps (Qwen3)

    def check(self, preset: ModelPreset) -> None:
        for name, what in self.requires:
            if getattr(preset, name) is None:
                raise ValueError(f"a {preset.family} preset needs {what}")
        if self.video_samplers is not None and preset.video_sampler not in self.video_samplers:
            raise ValueError(
                f"a {preset.family} preset samples videos with {' or '.join(self.video_samplers)}, "
                f"not {preset.video_sampler}"
            )
        if preset.timestamps and not self.timestamps:
            able = ", ".join(f for f, r in FAMILY_RULES.items() if r.timestamps)
            raise ValueError(f"timestamps (Qwen3 per-group text) apply to the {able} family only")


_TEXT = ("text", "a text section (placeholders and wrappers)")
_TILED = FamilyRules(
    requires=(_TEXT, ("tiling", "a tiling section")),
    read_folder=_tiled_folder,
    video_samplers=("uniform", "none"),
)

FAMILY_RULES: dict[str, FamilyRules] = {
    "qwen": FamilyRules(
        requires=(("video_min_pixels", "video_min_pixels"), ("video_max_pixels", "video_max_pixels")),
        read_folder=_qwen_folder,
        video_samplers=("qwen_vl_utils", "qwen3"),
        timestamps=True,
    ),
    "internvl": _TILED,
    "nemotron_vl": _TILED,
    "llava": FamilyRules(
        requires=(
            _TEXT,
            ("anyres", "an anyres section"),
            ("chat_template", "a chat_template (LLaVA does not use ChatML)"),
        ),
        read_folder=_llava_folder,
        video_samplers=("none",),
    ),
}
