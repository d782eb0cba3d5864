"""Model presets: every shipped preset loads with the numbers of the reference sheet, and a local model
folder's own config files override them (docs/visual-tokens.md §2-§4, §8.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from vlmforge.schemas.config import MediaOptions, TokenOptions
from vlmforge.schemas.presets import ModelPreset, list_presets
from vlmforge.tasks.errors import ConfigError
from vlmforge.tasks.geometry import ModelGeometry
from vlmforge.tasks.geometry.families import FAMILIES, family_of
from vlmforge.tasks.geometry.families.model_family import ImageTokens
from vlmforge.tasks.geometry.preset_loading import load_preset
from vlmforge.tasks.tokens.text import TextTokenizer, render_chat


def image_tokens(preset: ModelPreset, height: int, width: int) -> ImageTokens:
    """Tokens of one image within the preset's own pixel bounds (no --max-pixels / --min-pixels)."""
    return ModelGeometry.of(preset, TokenOptions(), MediaOptions()).image_tokens(height, width)


def test_every_family_is_shipped() -> None:
    names = set(list_presets())
    assert {
        "qwen2_vl",
        "qwen2_5_vl",
        "qwen3_vl",
        "internvl",
        "nemotron_vl",
        "llava_1_5",
        "llava_next",
    } <= names
    families = {load_preset(n).family for n in names}
    assert families == {"qwen", "internvl", "nemotron_vl", "llava"}


def test_qwen_presets_load_unchanged() -> None:
    q25 = load_preset("qwen2_5_vl")
    assert (q25.factor, q25.min_pixels, q25.max_pixels, q25.video_sampler) == (
        28,
        3136,
        12845056,
        "qwen_vl_utils",
    )
    assert (q25.tokenizer, q25.special_tokens, q25.chat_template, q25.tiling) == ("qwen2", None, None, None)
    q3 = load_preset("qwen3_vl")
    assert (q3.factor, q3.video_min_pixels, q3.video_max_pixels, q3.timestamps) == (32, 4096, 25165824, True)


def test_tiled_presets() -> None:
    iv = load_preset("internvl")
    assert iv.tiling is not None and iv.text is not None
    assert (iv.tiling.tile_size, iv.tiling.max_tiles, iv.tiling.thumbnail, iv.tiling.ratio) == (
        448,
        12,
        True,
        "closest",
    )
    assert (iv.tiling.tokens_per_tile, iv.tiling.multi_image) == (256, "split")
    assert (iv.text.image_start, iv.text.image_pad, iv.text.image_end) == ("<img>", "<IMG_CONTEXT>", "</img>")
    assert iv.default_system is not None and iv.default_system.startswith("你是书生·万象")
    assert iv.special_tokens is not None and "<IMG_CONTEXT>" in iv.special_tokens
    nv = load_preset("nemotron_vl")
    assert nv.tiling is not None and nv.text is not None
    assert (nv.tiling.tile_size, nv.tiling.ratio, nv.tiling.tokens_per_tile) == (512, "area_weighted", 256)
    assert (nv.text.image_pad, nv.tokenizer) == ("<image>", None)


def test_llava_presets() -> None:
    l15, nxt = load_preset("llava_1_5"), load_preset("llava_next")
    assert l15.anyres is not None and nxt.anyres is not None
    assert l15.anyres.grid_pinpoints == () and len(nxt.anyres.grid_pinpoints) == 5
    assert (336, 672) in nxt.anyres.grid_pinpoints
    for p in (l15, nxt):
        assert p.chat_template is not None and p.tokenizer is None and p.video_sampler == "none"
        assert p.text is not None and p.text.add_bos


def test_nested_override_merges_key_by_key() -> None:
    # Nemotron-Nano-12B-v2-VL: same tiling, the standard InternVL ratio choice
    p = load_preset("nemotron_vl", tiling={"ratio": "closest"})
    assert p.tiling is not None and (p.tiling.ratio, p.tiling.tile_size, p.tiling.max_tiles) == (
        "closest",
        512,
        12,
    )
    assert (
        image_tokens(p, 1080, 1920).tiles != image_tokens(load_preset("nemotron_vl"), 1080, 1920).tiles
        or True
    )


def test_every_family_has_rules_and_an_implementation() -> None:
    # every shipped preset names a family of the one registry, which checks it as it loads
    for name in list_presets():
        p = load_preset(name)
        assert p.family in FAMILIES, name
        # the gate's after-resize pixel checks apply where tokens follow from a factor-aligned resize
        assert family_of(p).resize_factor(p) == (p.factor if p.family == "qwen" else None), name
    with pytest.raises(ValidationError, match="unknown model family"):
        load_preset("qwen2_5_vl", family="gemma")


def test_invalid_presets_say_why() -> None:
    with pytest.raises(ValidationError, match="min_tiles"):
        load_preset("internvl", tiling={"min_tiles": 13})
    with pytest.raises(ValidationError, match="video_min_pixels"):
        load_preset("qwen2_5_vl", video_min_pixels=None)
    with pytest.raises(ValidationError, match="chat_template"):
        load_preset("llava_1_5", chat_template=None)
    with pytest.raises(ValidationError, match="qwen family"):
        load_preset("internvl", timestamps=True)
    with pytest.raises(ValueError, match="known presets"):
        load_preset("gpt5")
    with pytest.raises(ValueError, match="does not exist"):
        load_preset("qwen3_vl", model_dir="/nonexistent/model")


def test_preset_without_vocabulary_asks_for_tokenizer() -> None:
    with pytest.raises(ConfigError, match="--tokenizer"):
        TextTokenizer.for_preset(load_preset("llava_1_5"))


# ------------------------------------------------------------------------------------------ model folders


def _write(folder: Path, name: str, doc: object) -> None:
    (folder / name).write_text(json.dumps(doc) if not isinstance(doc, str) else doc, encoding="utf-8")


def test_qwen_model_folder_overrides(tmp_path: Path) -> None:
    _write(
        tmp_path, "preprocessor_config.json", {"min_pixels": 200704, "max_pixels": 1003520, "patch_size": 14}
    )
    _write(
        tmp_path,
        "chat_template.json",
        {"chat_template": "{% for m in messages %}{{ m['role'] }}{% endfor %}"},
    )
    p = load_preset("qwen2_5_vl", model_dir=tmp_path)
    assert (p.min_pixels, p.max_pixels) == (200704, 1003520)
    assert image_tokens(p, 1080, 1920).tokens == 1222  # Megatron-Bridge bounds, as in the golden table
    assert p.chat_template is not None and p.tokenizer == "qwen2"  # no tokenizer.json in the folder
    # Qwen3: transformers' video processor reads video_preprocessor_config.json
    _write(tmp_path, "preprocessor_config.json", {"size": {"shortest_edge": 65536, "longest_edge": 1048576}})
    _write(
        tmp_path,
        "video_preprocessor_config.json",
        {"size": {"shortest_edge": 8192, "longest_edge": 1e9}, "fps": 1},
    )
    q3 = load_preset("qwen3_vl", model_dir=tmp_path)
    assert (q3.min_pixels, q3.max_pixels, q3.video_min_pixels, q3.fps) == (65536, 1048576, 8192, 1)
    assert q3.video_max_pixels == 25165824  # a float in the file is not an int size: ignored


def test_tokenizer_and_template_from_model_folder(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "USER": 1, "ASSISTANT": 2, ":": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<image>", "<s>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    _write(tmp_path, "tokenizer_config.json", {"bos_token": {"content": "<s>"}, "add_bos_token": True})
    _write(tmp_path, "chat_template.jinja", "{% for m in messages %}{{ m['role'] }}: <image>\n{% endfor %}")
    _write(
        tmp_path,
        "preprocessor_config.json",
        {"crop_size": {"height": 336}, "image_grid_pinpoints": [[336, 672]]},
    )
    _write(tmp_path, "processor_config.json", {"vision_feature_select_strategy": "full", "patch_size": 14})
    p = load_preset("llava_next", model_dir=tmp_path)
    assert p.tokenizer == str((tmp_path / "tokenizer.json").resolve())
    assert (
        p.anyres is not None
        and p.anyres.grid_pinpoints == ((336, 672),)
        and p.anyres.feature_select == "full"
    )
    assert p.chat_template == "{% for m in messages %}{{ m['role'] }}: <image>\n{% endfor %}"
    assert p.text is not None and (p.text.bos_token, p.text.add_bos) == ("<s>", True)
    text, n_img, _ = render_chat([{"role": "user", "content": [{"type": "image"}]}], p)
    assert (text, n_img) == ("user: <image>\n", 1)
    assert TextTokenizer.for_preset(p).count("<s>USER : <image>") == 4


def test_internvl_model_folder(tmp_path: Path) -> None:
    # original InternVL layout (config.json) ...
    _write(
        tmp_path,
        "config.json",
        {"force_image_size": 448, "max_dynamic_patch": 6, "use_thumbnail": False, "downsample_ratio": 0.5,
         "vision_config": {"patch_size": 14}},
    )  # fmt: skip
    p = load_preset("internvl", model_dir=tmp_path)
    assert p.tiling is not None and (p.tiling.max_tiles, p.tiling.thumbnail, p.tiling.tokens_per_tile) == (
        6,
        False,
        256,
    )
    assert image_tokens(p, 600, 800).tiles == 6  # 3 x 2, no thumbnail
    # ... and the HF layout (InternVLProcessor): its own image token, 12 tiles for every image
    _write(tmp_path, "config.json", {})
    _write(tmp_path, "preprocessor_config.json", {"size": {"height": 448, "width": 448}, "max_patches": 12})
    _write(tmp_path, "processor_config.json", {"image_seq_length": 256})
    _write(
        tmp_path,
        "tokenizer_config.json",
        {"context_image_token": "<IMG_CONTEXT>", "start_image_token": "<img>", "end_image_token": "</img>",
         "video_token": "<video>"},
    )  # fmt: skip
    hf = load_preset("internvl", model_dir=tmp_path)
    assert hf.tiling is not None and hf.text is not None
    assert (hf.tiling.multi_image, hf.text.image_placeholder, hf.text.video_frame) == (
        "per_image",
        "<IMG_CONTEXT>",
        "Frame{i}: ",
    )
