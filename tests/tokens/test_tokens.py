"""Golden values of docs/visual-tokens.md §9 (Qwen rows), tokenizer and template checks."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from vlmforge.schemas.config import TokenOptions
from vlmforge.schemas.presets import ModelPreset, list_presets
from vlmforge.tasks.geometry import PixelBounds, media_tokens
from vlmforge.tasks.geometry.families.model_family import ImageTokens, VideoSpec, VideoTokens
from vlmforge.tasks.geometry.families.qwen import IMAGE_PLACEHOLDER, VIDEO_PLACEHOLDER
from vlmforge.tasks.geometry.families.qwen_video import (
    qvu_smart_resize,
    timestamp_text,
    video_timestamps,
)
from vlmforge.tasks.geometry.frame_sampling import VideoTooShortError
from vlmforge.tasks.geometry.media_tokens import sample_video_frames
from vlmforge.tasks.geometry.preset_loading import load_preset
from vlmforge.tasks.geometry.resize_rule import AspectRatioError, pipeline_size, smart_resize
from vlmforge.tasks.tokens.count import SampleTokens, count_sample_tokens, expand_sample
from vlmforge.tasks.tokens.feed_paths import ProcessorFeed
from vlmforge.tasks.tokens.text import TextTokenizer, render_chat
from vlmforge.tasks.tokens.token_input import TokenInput

MB = {"min_pixels": 200704, "max_pixels": 1003520}  # Megatron-Bridge QwenVL task encoder defaults
SIZES = [(1080, 1920), (480, 640), (4000, 3000), (224, 224), (28, 5000)]  # H x W

# The lower functions take resolved pixel bounds; these give them the bounds a run with the given knobs
# (``max_pixels`` / ``min_pixels`` as TokenOptions names them, none: the preset's) resolves, through the one
# place that resolves them (PixelBounds.of).


def bounds_of(preset: ModelPreset, **knobs: Any) -> PixelBounds:
    return PixelBounds.of(preset, TokenOptions(**knobs))


def image_tokens_of(
    preset: ModelPreset, height: int, width: int, n_images: int = 1, **knobs: Any
) -> ImageTokens:
    b = bounds_of(preset, **knobs)
    return media_tokens.image_tokens(
        preset, height, width, min_pixels=b.image_min_pixels, max_pixels=b.image_max_pixels, n_images=n_images
    )


def image_tokens_batch_of(preset: ModelPreset, heights: Any, widths: Any, **knobs: Any) -> Any:
    b = bounds_of(preset, **knobs)
    return media_tokens.image_tokens_batch(
        preset, heights, widths, min_pixels=b.image_min_pixels, max_pixels=b.image_max_pixels
    )


def pipeline_size_of(preset: ModelPreset, height: int, width: int, **knobs: Any) -> tuple[int, int]:
    b = bounds_of(preset, **knobs)
    return pipeline_size(preset, height, width, min_pixels=b.image_min_pixels, max_pixels=b.image_max_pixels)


def video_tokens_of(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    *,
    indices: Any = None,
    video_fps: float | None = None,
    **knobs: Any,
) -> VideoTokens:
    cap = bounds_of(preset, **knobs).video_frame_cap
    return media_tokens.video_tokens(
        preset, n_sampled, height, width, frame_cap=cap, indices=indices, video_fps=video_fps
    )


def count_of(
    messages: Any, preset: ModelPreset, tokenizer: TextTokenizer, sizes: Any, videos: Any, **knobs: Any
) -> SampleTokens:
    return count_sample_tokens(messages, preset, tokenizer, sizes, videos, bounds=bounds_of(preset, **knobs))


def expand_of(messages: Any, preset: ModelPreset, sizes: Any, videos: Any, **knobs: Any) -> Any:
    return expand_sample(messages, preset, sizes, videos, bounds=bounds_of(preset, **knobs))


needs_qwen_vocab = pytest.mark.skipif(
    importlib.util.find_spec("dashscope") is None, reason="dashscope (qwen.tiktoken) not installed"
)


@pytest.fixture(scope="module")
def q25() -> ModelPreset:
    return load_preset("qwen2_5_vl")


@pytest.fixture(scope="module")
def q3() -> ModelPreset:
    return load_preset("qwen3_vl")


@pytest.fixture(scope="module")
def qwen_tok() -> TextTokenizer:
    if importlib.util.find_spec("dashscope") is None:
        pytest.skip("dashscope (qwen.tiktoken) not installed")
    return TextTokenizer.builtin_qwen2()


# ------------------------------------------------------------------------------------------ presets


def test_presets_listed_and_loaded() -> None:
    assert {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"} <= set(list_presets())
    q2 = load_preset("qwen2_vl")
    assert (q2.patch_size, q2.merge_size, q2.temporal_patch_size, q2.factor) == (14, 2, 2, 28)
    assert (q2.min_pixels, q2.max_pixels) == (3136, 12845056)
    assert (q2.video_min_pixels, q2.video_max_pixels) == (128 * 28 * 28, 768 * 28 * 28)
    assert q2.video_total_pixels == int(128000 * 28 * 28 * 0.9)
    assert q2.default_system == "You are a helpful assistant." and not q2.timestamps
    q3 = load_preset("qwen3_vl")
    assert (q3.factor, q3.min_pixels, q3.max_pixels) == (32, 65536, 16777216)
    assert (q3.video_min_pixels, q3.video_max_pixels, q3.video_total_pixels) == (4096, 25165824, None)
    assert q3.timestamps and q3.default_system is None and q3.video_sampler == "qwen3"
    assert (q3.fps, q3.min_frames, q3.max_frames) == (2.0, 4, 768)


def test_preset_overrides_unknown_extra_frozen() -> None:
    p = load_preset("qwen2_5_vl", max_pixels=1003520)
    assert p.max_pixels == 1003520 and p.min_pixels == 3136
    with pytest.raises(ValueError, match="qwen2_5_vl.*qwen3_vl"):
        load_preset("qwen9_vl")
    with pytest.raises(ValidationError):
        load_preset("qwen3_vl", not_a_field=1)
    with pytest.raises(ValidationError):
        p.max_pixels = 5  # type: ignore[misc, unused-ignore]


# ------------------------------------------------------------------------------------------- images


def test_qwen25_images_hub_and_mb(q25: ModelPreset) -> None:
    assert [image_tokens_of(q25, h, w).tokens for h, w in SIZES] == [2691, 391, 15301, 64, 179]
    assert [image_tokens_of(q25, h, w, **MB).tokens for h, w in SIZES] == [1222, 391, 1230, 256, 428]
    # processor class default 3136 / 1003520: only max_pixels overridden
    assert image_tokens_of(q25, 1080, 1920, max_pixels=1003520).tokens == 1222


def test_qwen3_images_hub_and_mb(q3: ModelPreset) -> None:
    assert [image_tokens_of(q3, h, w).tokens for h, w in SIZES] == [2040, 300, 11750, 64, 156]
    assert [image_tokens_of(q3, h, w, **MB).tokens for h, w in SIZES] == [943, 300, 972, 196, 376]


def test_image_tokens_grid_consistency(q3: ModelPreset) -> None:
    r = image_tokens_of(q3, 1080, 1920)
    assert r.resized_height % 32 == 0 and r.resized_width % 32 == 0
    assert r.tokens == (r.resized_height // 16) * (r.resized_width // 16) // 4
    # idempotent: resizing the stored (resized) size again changes nothing
    again = image_tokens_of(q3, r.resized_height, r.resized_width)
    assert (again.resized_height, again.resized_width, again.tokens) == (
        r.resized_height,
        r.resized_width,
        r.tokens,
    )


def test_bridge_double_resize(q25: ModelPreset, q3: ModelPreset) -> None:
    # qwen-vl-utils image pre-resize at factor 28 (4..16384 tokens), then the processor with Bridge min/max
    pre = qvu_smart_resize(1984, 1498, 28, 4 * 28 * 28, 16384 * 28 * 28, 200)
    assert pre == (1988, 1512)
    assert (image_tokens_of(q3, 1984, 1498, **MB).tokens, image_tokens_of(q3, *pre, **MB).tokens) == (
        972,
        945,
    )
    assert (image_tokens_of(q25, 1984, 1498, **MB).tokens, image_tokens_of(q25, *pre, **MB).tokens) == (
        1271,
        1271,
    )


def test_smart_resize_ties_to_even() -> None:
    assert smart_resize(70, 70, 28, 3136, 1003520) == (56, 56)  # 70 / 28 = 2.5 -> 2
    assert smart_resize(98, 98, 28, 3136, 1003520) == (112, 112)  # 3.5 -> 4


def test_smart_resize_branches() -> None:
    # shrink from the ORIGINAL area, max(factor, ...) after the floor keeps a thin side at one factor
    h, w = smart_resize(28, 5000, 28, 3136, 12845056)
    assert (h, w) == (28, 5012)
    h, w = smart_resize(4000, 3000, 28, 3136, 1003520)
    assert h * w <= 1003520 and h % 28 == 0 and w % 28 == 0
    # grow branch for a tiny image (round gives 0 rows)
    assert smart_resize(10, 10, 28, 3136, 1003520) == (56, 56)


def test_aspect_ratio_and_zero_side_raise(q25: ModelPreset) -> None:
    with pytest.raises(AspectRatioError):
        smart_resize(10, 2500, 28, 3136, 12845056)
    with pytest.raises(ValueError):  # AspectRatioError is a ValueError
        image_tokens_of(q25, 2500, 10)
    with pytest.raises(AspectRatioError):
        smart_resize(0, 100, 28, 3136, 12845056)
    assert smart_resize(10, 2000, 28, 3136, 12845056)  # ratio exactly 200 is allowed


# ------------------------------------------------------------------------------------------- videos


def test_qwen_vl_utils_video_7200(q25: ModelPreset) -> None:
    idx = sample_video_frames(q25, 300, 30.0)  # 10 s @ 30 fps
    assert len(idx) == 20 and idx[0] == 0 and idx[-1] == 299
    v = video_tokens_of(q25, len(idx), 720, 1280)
    assert (v.resized_height, v.resized_width, v.grid_t, v.tokens, v.extra_text_tokens) == (
        560,
        1008,
        10,
        7200,
        0,
    )


def test_qwen3_video_8800_and_timestamps(q3: ModelPreset) -> None:
    idx = sample_video_frames(q3, 300, 30.0)
    assert idx == [0, 16, 31, 47, 63, 79, 94, 110, 126, 142, 157, 173, 189, 205, 220, 236, 252, 268, 283, 299]
    stamps = [f"{t:.1f}" for t in video_timestamps(idx, 30.0)]
    assert stamps == ["0.3", "1.3", "2.4", "3.4", "4.5", "5.5", "6.6", "7.6", "8.7", "9.7"]
    v = video_tokens_of(q3, len(idx), 720, 1280, indices=idx, video_fps=30.0)
    assert (v.resized_height, v.resized_width, v.grid_t, v.tokens) == (704, 1280, 10, 8800)
    # block replacing the 3-token placeholder: 10 x (6 + 2 + 880) = 8880
    assert 3 + v.extra_text_tokens + v.tokens == 8880


def test_qwen3_video_needs_indices(q3: ModelPreset) -> None:
    with pytest.raises(ValueError, match="indices"):
        video_tokens_of(q3, 20, 720, 1280)
    with pytest.raises(ValueError):
        video_tokens_of(q3, 20, 720, 1280, indices=[0, 1, 2], video_fps=30.0)


def test_qwen3_sample_frames_short_clip(q3: ModelPreset) -> None:
    assert sample_video_frames(q3, 7, 30.0) == [0, 2, 4, 6]  # min_frames 4, capped at T
    assert sample_video_frames(q3, 3, 30.0) == [0, 1, 2]  # capped at T (odd, the processor pads)
    v = video_tokens_of(q3, 3, 256, 256, indices=[0, 1, 2], video_fps=30.0)
    assert v.grid_t == 2


def test_video_too_short(q25: ModelPreset, q3: ModelPreset) -> None:
    for preset in (q25, q3):
        with pytest.raises(VideoTooShortError):
            sample_video_frames(preset, 0, 30.0)
    # Qwen3VLVideoProcessor's smart_resize refuses one frame before its patchify could pad it
    with pytest.raises(VideoTooShortError, match="at least 2"):
        sample_video_frames(q3, 1, 30.0)
    with pytest.raises(VideoTooShortError):
        video_tokens_of(q3, 1, 720, 1280, indices=[0], video_fps=30.0)
    assert sample_video_frames(q25, 2, 30.0) == [0, 1]


@pytest.mark.parametrize("preset_name", ["qwen2_5_vl", "qwen2_vl"])
@pytest.mark.parametrize(("height", "width"), [(48, 64), (720, 1280), (1080, 608)])
def test_one_frame_video_is_padded_to_one_temporal_patch(preset_name: str, height: int, width: int) -> None:
    """qwen-vl-utils / Qwen2VLVideoProcessor pad a frame list to a multiple of temporal_patch_size by
    repeating the last frame: one frame costs exactly what the same frame twice costs (grid_t = 1)."""
    preset = load_preset(preset_name)
    for fps in (1.0, 30.0):
        assert sample_video_frames(preset, 1, fps) == [0]
        assert sample_video_frames(preset, 1, fps, max_num_frames=2, mode="truncate") == [0]
    one, two = video_tokens_of(preset, 1, height, width), video_tokens_of(preset, 2, height, width)
    assert one.grid_t == 1 and one.tokens > 0
    assert one == two
    f = preset.factor
    assert one.tokens == math.ceil(1 / preset.temporal_patch_size) * (one.resized_height // f) * (
        one.resized_width // f
    )


def test_max_num_frames_uniform_vs_truncate(q25: ModelPreset, q3: ModelPreset) -> None:
    full = sample_video_frames(q25, 300, 30.0)
    uni = sample_video_frames(q25, 300, 30.0, max_num_frames=8)
    assert len(uni) == 8 and uni[0] == 0 and uni[-1] == 299 and set(uni) <= set(full)
    assert uni == sorted(uni)
    trunc = sample_video_frames(q25, 300, 30.0, max_num_frames=8, mode="truncate")
    assert trunc == full[:8]
    # uniform keeps the count a multiple of the temporal patch; truncate keeps exactly the first N
    assert len(sample_video_frames(q25, 300, 30.0, max_num_frames=7)) == 6
    assert len(sample_video_frames(q3, 300, 30.0, max_num_frames=7, mode="truncate")) == 7
    # knob above the sampled count: no change
    assert sample_video_frames(q25, 300, 30.0, max_num_frames=60) == full
    # fewer frames -> larger per-frame budget is possible but never more total tokens than the full clip here
    assert (
        video_tokens_of(q25, len(uni), 720, 1280).tokens < video_tokens_of(q25, len(full), 720, 1280).tokens
    )
    with pytest.raises(ValueError):
        sample_video_frames(q25, 300, 30.0, max_num_frames=1)
    with pytest.raises(ValueError):
        sample_video_frames(q25, 300, 30.0, max_num_frames=8, mode="drop")  # type: ignore[arg-type, unused-ignore]


def test_video_max_pixels_knob(q25: ModelPreset, q3: ModelPreset) -> None:
    v = video_tokens_of(q25, 20, 720, 1280, max_pixels=200704)
    assert v.resized_height * v.resized_width <= 200704
    idx = sample_video_frames(q3, 300, 30.0)
    v3 = video_tokens_of(q3, 20, 720, 1280, indices=idx, video_fps=30.0, max_pixels=200704)
    assert v3.resized_height * v3.resized_width <= 200704 and v3.tokens < 8800


# ---------------------------------------------------------------------------------------- tokenizer


@needs_qwen_vocab
def test_builtin_qwen2_ids(qwen_tok: TextTokenizer) -> None:
    assert qwen_tok.encode("Hello") == [9707]
    assert qwen_tok.encode("Hello, world!") == [9707, 11, 1879, 0]
    assert qwen_tok.encode("你好，世界") == [108386, 3837, 99489]
    system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    assert qwen_tok.encode(system) == [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198]
    assert qwen_tok.count(system) == 11
    assert qwen_tok.encode(IMAGE_PLACEHOLDER) == [151652, 151655, 151653]
    assert qwen_tok.encode(VIDEO_PLACEHOLDER) == [151652, 151656, 151653]
    assert qwen_tok.encode("<|endoftext|><tool_response></tool_response><think></think>") == [
        151643,
        151665,
        151666,
        151667,
        151668,
    ]
    assert qwen_tok.encode("123") == [16, 17, 18]  # every digit is its own token
    # NFC: a decomposed "é" counts like the composed one
    assert qwen_tok.encode("cafe\u0301") == qwen_tok.encode("caf\u00e9")


@needs_qwen_vocab
def test_timestamp_token_counts(qwen_tok: TextTokenizer) -> None:
    assert timestamp_text(0.5) == "<0.5 seconds>"
    assert [qwen_tok.count(timestamp_text(t)) for t in (0.5, 12.3, 123.4)] == [6, 7, 8]


def _synthetic_tokenizer_json(path: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(["hello world", "hello there", "world of hello"] * 20, trainer)
    tok.add_special_tokens(["<|image_pad|>"])
    tok.save(str(path))
    return tok


def test_from_path_synthetic_tokenizer(tmp_path: Path) -> None:
    ref = _synthetic_tokenizer_json(tmp_path / "tokenizer.json")
    by_dir = TextTokenizer.from_path(tmp_path)
    by_file = TextTokenizer.from_path(tmp_path / "tokenizer.json")
    text = "hello world<|image_pad|>hello"
    expected = ref.encode(text, add_special_tokens=False).ids
    assert by_dir.encode(text) == by_file.encode(text) == expected
    assert by_dir.count("hello") == 1  # merged by the trained BPE
    pad_id = ref.token_to_id("<|image_pad|>")
    assert by_dir.encode("<|image_pad|>") == [pad_id]
    assert by_dir.count("a<|image_pad|>b") == by_dir.count("a") + 1 + by_dir.count("b")
    assert by_dir.count("<|image_pad|>" * 5) == 5
    with pytest.raises(FileNotFoundError):
        TextTokenizer.from_path(tmp_path / "missing")


# -------------------------------------------------------------------------------- template + sample


def _sample(n_images: int = 1, video: bool = False, system: str | None = None) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"type": "image", "image": f"img{i}.jpg"} for i in range(n_images)]
    if video:
        user.append({"type": "video", "video": "clip.mp4"})
    user.append({"type": "text", "text": "Describe this."})
    msgs: list[dict[str, Any]] = []
    if system is not None:
        msgs.append({"role": "system", "content": [{"type": "text", "text": system}]})
    msgs.append({"role": "user", "content": user})
    msgs.append(
        {"role": "assistant", "content": [{"type": "text", "text": "A cat"}, {"type": "text", "text": "."}]}
    )
    return msgs


def test_render_chat_qwen25(q25: ModelPreset) -> None:
    text, n_img, n_vid = render_chat(_sample(2, video=True), q25)
    assert (n_img, n_vid) == (2, 1)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{IMAGE_PLACEHOLDER}{IMAGE_PLACEHOLDER}{VIDEO_PLACEHOLDER}"
        "Describe this.<|im_end|>\n"
        "<|im_start|>assistant\nA cat.<|im_end|>\n"
    )
    # an explicit system message replaces the default one
    text, _, _ = render_chat(_sample(0, system="Be brief."), q25)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nDescribe this.")
    assert "helpful assistant" not in text


def test_render_chat_qwen3(q3: ModelPreset) -> None:
    text, n_img, n_vid = render_chat(_sample(1), q3)
    assert (n_img, n_vid) == (1, 0)
    assert text == (
        f"<|im_start|>user\n{IMAGE_PLACEHOLDER}Describe this.<|im_end|>\n"
        "<|im_start|>assistant\nA cat.<|im_end|>\n"
    )
    with pytest.raises(ValueError):
        render_chat([{"role": "user", "content": [{"type": "audio"}]}], q3)


@needs_qwen_vocab
def test_count_sample_tokens_images(q25: ModelPreset, qwen_tok: TextTokenizer) -> None:
    one = count_of(_sample(1), q25, qwen_tok, [(480, 640)], [])
    assert one.per_image == [391] and one.per_video == []
    assert one.total_tokens == one.text_tokens + one.visual_tokens and one.visual_tokens == 391
    text, _, _ = render_chat(_sample(1), q25)
    assert one.text_tokens == qwen_tok.count(text) - 1
    two = count_of(_sample(2), q25, qwen_tok, [(480, 640), (1080, 1920)], [])
    assert two.per_image == [391, 2691]
    assert two.total_tokens - one.total_tokens == 2691 + 2  # its pads + vision_start/vision_end
    # max_pixels knob applies to every image
    mb = count_of(_sample(2), q25, qwen_tok, [(480, 640), (1080, 1920)], [], max_pixels=1003520)
    assert mb.per_image == [391, 1222] and mb.text_tokens == two.text_tokens
    with pytest.raises(ValueError):
        count_of(_sample(2), q25, qwen_tok, [(480, 640)], [])


@needs_qwen_vocab
def test_count_sample_tokens_videos(q25: ModelPreset, q3: ModelPreset, qwen_tok: TextTokenizer) -> None:
    idx = sample_video_frames(q3, 300, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=720, width=1280, indices=idx, video_fps=30.0)
    base3 = count_of(_sample(0), q3, qwen_tok, [], [])
    with_video3 = count_of(_sample(0, video=True), q3, qwen_tok, [], [spec])
    assert with_video3.per_video == [8800]
    assert with_video3.total_tokens - base3.total_tokens == 8880  # 10 x (timestamp 6 + 2 wrappers + 880 pads)
    assert with_video3.total_tokens == with_video3.text_tokens + with_video3.visual_tokens

    spec25 = VideoSpec(n_sampled_frames=20, height=720, width=1280)
    base25 = count_of(_sample(0), q25, qwen_tok, [], [])
    with_video25 = count_of(_sample(0, video=True), q25, qwen_tok, [], [spec25])
    assert with_video25.per_video == [7200]
    assert with_video25.total_tokens - base25.total_tokens == 7200 + 2  # no timestamp text for Qwen2.5


@needs_qwen_vocab
def test_count_sample_tokens_timestamp_merges_with_text(q3: ModelPreset, qwen_tok: TextTokenizer) -> None:
    # text parts are concatenated as-is: "Look:" + "<0.3 seconds>" tokenizes ":<" as one token
    idx = sample_video_frames(q3, 300, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=720, width=1280, indices=idx, video_fps=30.0)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "video"}]}]
    got = count_of(msgs, q3, qwen_tok, [], [spec])
    text, _, n_vid = render_chat(msgs, q3)
    stamps = video_timestamps(idx, 30.0)
    expanded = text.replace(VIDEO_PLACEHOLDER, "".join(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps))
    assert got.text_tokens == qwen_tok.count(expanded) - len(stamps)  # one pad per group in `expanded`
    v = video_tokens_of(q3, len(idx), 720, 1280, indices=idx, video_fps=30.0)
    no_merge = qwen_tok.count(text) - n_vid + v.extra_text_tokens + 1
    assert got.text_tokens == no_merge - 1
    assert got.total_tokens == got.text_tokens + 8800


# ============================================================================================================
# Every family: golden values (reference §9), exact text expansion, knobs, --seq-len, transformers cross-check
# ============================================================================================================

QWEN2_VL_TEMPLATE = (  # the Qwen2-VL / Qwen2.5-VL hub chat template (chat_template.json)
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def internvl() -> ModelPreset:
    return load_preset("internvl")


@pytest.fixture(scope="module")
def nemotron() -> ModelPreset:
    return load_preset("nemotron_vl")


def test_qwen2_vl_same_image_math_as_qwen25(q25: ModelPreset) -> None:
    q2 = load_preset("qwen2_vl")
    assert [image_tokens_of(q2, h, w).tokens for h, w in SIZES] == [2691, 391, 15301, 64, 179]
    assert [image_tokens_of(q2, h, w, **MB).tokens for h, w in SIZES] == [1222, 391, 1230, 256, 428]


def test_qwen_min_pixels_branch_and_extreme_ratios(q25: ModelPreset, q3: ModelPreset) -> None:
    # tiny images grow to min_pixels (4 tokens at the hub minimum for Qwen2.5, 64 for Qwen3)
    assert image_tokens_of(q25, 10, 10).tokens == 4 and image_tokens_of(q3, 10, 10).tokens == 64
    # 1 x 200 is the widest allowed; one more pixel and it is refused
    assert image_tokens_of(q25, 1, 200).tokens >= 1 and image_tokens_of(q3, 200, 1).tokens >= 1
    with pytest.raises(AspectRatioError):
        image_tokens_of(q3, 1, 201)


def test_internvl_tiles_golden(internvl: ModelPreset) -> None:
    sizes_wh = [(800, 600), (1920, 1080), (1000, 200), (448, 448)]
    got = [image_tokens_of(internvl, h, w) for w, h in sizes_wh]
    assert [g.tiles for g in got] == [13, 9, 6, 1]
    assert [g.tokens for g in got] == [13 * 256, 9 * 256, 6 * 256, 256]
    assert (got[0].resized_width, got[0].resized_height) == (4 * 448, 3 * 448)  # 4 x 3 grid (+ thumbnail)
    # an exact ratio tie goes to the bigger grid only when the image covers more than half of it:
    # 600 x 600 stays 1 x 1, 700 x 700 -> 2 x 2 (+ thumbnail), 1000 x 1000 -> 3 x 3 (+ thumbnail)
    assert [image_tokens_of(internvl, s, s).tiles for s in (600, 700, 1000)] == [1, 5, 10]


def test_internvl_multi_image_split_budget(internvl: ModelPreset) -> None:
    # InternVL finetune: each of n images gets max(1, 12 // n) tiles
    assert image_tokens_of(internvl, 600, 800, n_images=2).tiles == 7  # 3 x 2 + thumbnail (6 tiles max)
    assert image_tokens_of(internvl, 600, 800, n_images=12).tiles == 1
    assert image_tokens_of(internvl, 600, 800, n_images=20).tiles == 1
    per_image = load_preset("internvl", tiling={"multi_image": "per_image"})
    assert image_tokens_of(per_image, 600, 800, n_images=12).tiles == 13


def test_nemotron_area_weighted_golden(nemotron: ModelPreset) -> None:
    assert [image_tokens_of(nemotron, h, w).tiles for w, h in [(1920, 1080), (800, 600)]] == [9, 13]
    assert image_tokens_of(nemotron, 1080, 1920).tokens == 9 * 256


def test_llava_golden() -> None:
    l15, nxt = load_preset("llava_1_5"), load_preset("llava_next")
    assert {image_tokens_of(l15, h, w).tokens for h, w in [(480, 640), (1080, 1920), (10, 10)]} == {576}
    hw = [(672, 672), (1080, 1920), (1920, 1080), (336, 336), (480, 640)]
    assert [image_tokens_of(nxt, h, w).tokens for h, w in hw] == [2928, 1948, 1968, 1176, 2340]


def test_tiled_and_llava_extreme_ratios(internvl: ModelPreset) -> None:
    assert image_tokens_of(internvl, 10, 2000).tiles == 13  # 12 x 1 + thumbnail
    with pytest.raises(AspectRatioError):
        image_tokens_of(internvl, 10, 2500)
    with pytest.raises(AspectRatioError):
        image_tokens_of(load_preset("llava_next"), 0, 10)


def test_pipeline_cap_applies_before_tiling(internvl: ModelPreset) -> None:
    # a 27 MP photo is stored at <= max_pixels; its tiles are chosen from the stored size
    stored = image_tokens_of(internvl, 4500, 6000, max_pixels=1_003_520)

    h, w = pipeline_size_of(internvl, 4500, 6000, max_pixels=1_003_520)
    assert h * w <= 1_003_520 and stored.tokens == image_tokens_of(internvl, h, w).tokens


@pytest.mark.parametrize(
    "name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "internvl", "nemotron_vl", "llava_next"]
)
def test_image_tokens_batch_matches_scalar(name: str) -> None:
    import numpy as np

    preset = load_preset(name)
    rng = np.random.default_rng(7)
    h = rng.integers(1, 5000, 400)
    w = rng.integers(1, 5000, 400)
    h[:3], w[:3] = (0, 10, 1), (10, 2500, 201)  # invalid sizes -> -1
    got = image_tokens_batch_of(preset, h, w, **({"max_pixels": 1_003_520} if name == "qwen2_5_vl" else {}))
    for hi, wi, g in zip(h.tolist(), w.tolist(), got.tolist(), strict=True):
        try:
            want = image_tokens_of(
                preset, hi, wi, **({"max_pixels": 1_003_520} if name == "qwen2_5_vl" else {})
            ).tokens
        except ValueError:
            want = -1
        assert g == want, (hi, wi)


# ------------------------------------------------------------------------------------------- videos


def test_tiled_video_one_tile_per_frame(internvl: ModelPreset, nemotron: ModelPreset) -> None:
    # InternVL budgets max_num_frame 32; Nemotron samples at most 10 frames
    assert len(sample_video_frames(internvl, 300, 30.0)) == 32
    assert sample_video_frames(internvl, 7, 30.0) == list(range(7))  # fewer frames than the budget: all
    assert sample_video_frames(nemotron, 301, 30.0) == [0, 33, 67, 100, 133, 167, 200, 233, 267, 300]
    v = video_tokens_of(internvl, 7, 480, 640)
    assert (v.tokens, v.grid_t, v.extra_text_tokens) == (7 * 256, 7, 0)
    # odd counts stay odd (no temporal pairing); the knob caps them
    assert len(sample_video_frames(internvl, 300, 30.0, max_num_frames=5)) == 5
    with pytest.raises(ValueError, match="no video"):
        sample_video_frames(load_preset("llava_1_5"), 300, 30.0)
    with pytest.raises(ValueError, match="no video"):
        video_tokens_of(load_preset("llava_next"), 4, 480, 640)


def test_qwen3_odd_frame_count_pads_last_group(q3: ModelPreset) -> None:
    idx = sample_video_frames(q3, 45, 15.0)  # 3 s @ 15 fps -> 6 frames at 2 fps
    assert len(idx) == 6
    v5 = video_tokens_of(q3, 5, 240, 320, indices=idx[:5], video_fps=15.0)
    v6 = video_tokens_of(q3, 6, 240, 320, indices=idx, video_fps=15.0)
    assert v5.grid_t == v6.grid_t == 3  # 5 frames pad to 6


# ------------------------------------------------------------------------- exact text for every family


def _full_expansion(exp_text: str, pad: str, spans: list[int]) -> str:
    """``exp_text`` with every pad repeated as many times as the visual tokens of its span."""
    parts = exp_text.split(pad)
    assert len(parts) == len(spans) + 1
    return parts[0] + "".join(pad * n + p for n, p in zip(spans, parts[1:], strict=True))


@needs_qwen_vocab
def test_internvl_count_equals_full_sequence(internvl: ModelPreset) -> None:

    tok = TextTokenizer.for_preset(internvl)
    assert (
        tok.count("<img><IMG_CONTEXT></img>") == 3 and tok.count("<think>") > 1
    )  # Qwen2.5 + InternVL specials
    msgs = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare."}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "The left one is larger."}]},
    ]
    sizes = [(600, 800), (1080, 1920)]
    got = count_of(msgs, internvl, tok, sizes, [])
    assert got.per_image == [7 * 256, 3 * 256]  # split budget: 6 tiles each
    exp = expand_of(msgs, internvl, sizes, [])
    assert exp.text.startswith("<|im_start|>system\n你是书生·万象")
    assert "<img><IMG_CONTEXT></img>\n<img><IMG_CONTEXT></img>\nCompare." in exp.text
    full = _full_expansion(exp.text, "<IMG_CONTEXT>", exp.span_tokens)
    assert got.total_tokens == tok.count(full)
    assert got.total_tokens == got.text_tokens + got.visual_tokens


@needs_qwen_vocab
def test_internvl_video_frames_are_labelled(internvl: ModelPreset) -> None:

    tok = TextTokenizer.for_preset(internvl)
    msgs = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    spec = VideoSpec(n_sampled_frames=3, height=240, width=320, indices=[0, 10, 20], video_fps=10.0)
    exp = expand_of(msgs, internvl, [], [spec])
    assert "Frame-1: <img><IMG_CONTEXT></img>\nFrame-2: <img><IMG_CONTEXT></img>\nFrame-3: <img>" in exp.text
    got = count_of(msgs, internvl, tok, [], [spec])
    assert got.per_video == [3 * 256]
    assert got.total_tokens == tok.count(_full_expansion(exp.text, "<IMG_CONTEXT>", exp.span_tokens))


def _word_tokenizer(path: Path, specials: list[str]) -> TextTokenizer:
    """A small real tokenizer.json (word level, specials as added tokens) loaded like a model's."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", "USER", "ASSISTANT", ":", "Describe", "this", ".", "A", "cat", "Frame", "sampled", "at"]
    words += ["seconds", "What", "?", "user", "assistant"] + [str(i) for i in range(10)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.save(str(path / "tokenizer.json"))
    return TextTokenizer.from_path(path)


def test_llava_count_with_bos_and_template(tmp_path: Path) -> None:

    tok = _word_tokenizer(tmp_path, ["<image>", "<s>"])
    nxt = load_preset("llava_next")
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "Describe this."}, {"type": "image"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
    ]
    text, n_img, _ = render_chat(msgs, nxt)  # the llava-hf template puts images first, then texts + " "
    assert (text, n_img) == ("USER: <image>\nDescribe this. ASSISTANT: A cat. ", 1)
    exp = expand_of(msgs, nxt, [(480, 640)], [])
    assert exp.text.startswith("<s>USER: <image>")  # the Llama tokenizer's BOS
    got = count_of(msgs, nxt, tok, [(480, 640)], [])
    assert got.per_image == [2340]
    assert got.total_tokens == tok.count(_full_expansion(exp.text, "<image>", exp.span_tokens))
    # the built-in Qwen vocabulary splits <image>: refused before counting anything
    if importlib.util.find_spec("dashscope") is not None:
        from vlmforge.tasks.errors import ConfigError

        with pytest.raises(ConfigError, match="splits the image token"):
            count_of(msgs, nxt, TextTokenizer.builtin_qwen2(), [(480, 640)], [])


def test_nemotron_video_time_labels(tmp_path: Path, nemotron: ModelPreset) -> None:
    tok = _word_tokenizer(tmp_path, ["<image>", "<img>", "</img>", "<|begin_of_text|>", "<|start_header_id|>",
                                     "<|end_header_id|>", "<|eot_id|>", "<video>"])  # fmt: skip
    msgs = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What ?"}]}]
    idx = sample_video_frames(nemotron, 90, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=480, width=640, indices=idx, video_fps=30.0)
    exp = expand_of(msgs, nemotron, [], [spec])
    assert (
        "Frame 1 sampled at 0.00 seconds: <img><image></img>\nFrame 2 sampled at 0.33 seconds: " in exp.text
    )
    got = count_of(msgs, nemotron, tok, [], [spec])
    assert got.per_video == [10 * 256]
    assert got.total_tokens == tok.count(_full_expansion(exp.text, "<image>", exp.span_tokens))
    with pytest.raises(ValueError, match="frame indices"):
        expand_of(msgs, nemotron, [], [VideoSpec(n_sampled_frames=10, height=480, width=640)])


def test_placeholder_mismatch_is_a_value_error(internvl: ModelPreset) -> None:

    msgs = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "a literal <image> in text"}, {"type": "image"}],
        }
    ]
    with pytest.raises(ValueError):
        expand_of(msgs, internvl, [(448, 448)], [])
    with pytest.raises(ValueError, match="image size"):
        expand_of(msgs[:0] + [{"role": "user", "content": [{"type": "image"}]}], internvl, [], [])


@needs_qwen_vocab
def test_model_template_renders_like_builtin(q25: ModelPreset, qwen_tok: TextTokenizer) -> None:
    from vlmforge.tasks.tokens.text import render_jinja

    with_template = load_preset("qwen2_5_vl", chat_template=QWEN2_VL_TEMPLATE)
    for msgs in (_sample(2, video=True), _sample(0, system="Be brief."), _sample(1)):
        assert render_chat(msgs, with_template) == render_chat(msgs, q25)
    spec = VideoSpec(n_sampled_frames=20, height=720, width=1280)
    assert count_of(_sample(1, video=True), with_template, qwen_tok, [(480, 640)], [spec]) == (
        count_of(_sample(1, video=True), q25, qwen_tok, [(480, 640)], [spec])
    )
    with pytest.raises(ValueError, match="chat template error: only user"):
        render_jinja("{{ raise_exception('only user turns') }}", [])
    # {% generation %} (llava-hf templates) renders its body
    assert render_jinja("{% generation %}x{% endgeneration %}", []) == "x"


# ------------------------------------------------------------------------------------------- --seq-len


def _long_answer(n_images: int = 1, words: int = 200) -> list[dict[str, Any]]:
    user: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    user.append({"type": "text", "text": "Describe this."})
    return [
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat. " * words}]},
    ]


@needs_qwen_vocab
def test_seq_len_layout_is_exact(q25: ModelPreset, qwen_tok: TextTokenizer) -> None:
    msgs = _long_answer(2)
    sizes = [(480, 640), (224, 224)]
    lay = ProcessorFeed().layout(TokenInput(msgs, sizes, [], q25, qwen_tok, bounds_of(q25)))
    ids = qwen_tok.encode(render_chat(msgs, q25)[0])
    # in the real sequence the pads repeat: find the last <|vision_end|> and the assistant header
    pads = {151655: [391, 64]}
    full: list[int] = []
    counts = iter(pads[151655])
    for i in ids:
        full.extend([i] * (next(counts) if i == 151655 else 1))
    assert lay.total == len(full)
    assert lay.last_visual_end == max(k for k, i in enumerate(full) if i == 151653) + 1
    header = qwen_tok.encode("<|im_start|>assistant\n")
    start = next(k for k in range(len(full)) if full[k : k + len(header)] == header) + len(header)
    assert lay.first_supervised == start


@needs_qwen_vocab
def test_seq_len_drop_and_truncate(q25: ModelPreset, qwen_tok: TextTokenizer) -> None:
    from vlmforge.tasks.tokens.seq_len import fit_seq_len, needs_layout

    sample = TokenInput(_long_answer(1), [(480, 640)], [], q25, qwen_tok, bounds_of(q25))
    tokens = sample.checked()
    lay = ProcessorFeed().layout(sample)

    def fit(seq_len: int | None, mode: str = "truncate") -> Any:  # as the batch's token step applies it
        layout = lay if needs_layout(tokens, seq_len, mode) else None  # type: ignore[arg-type]
        return fit_seq_len(tokens, seq_len, mode=mode, layout=layout)  # type: ignore[arg-type]

    assert fit(None).status == "ok" and fit(tokens.total_tokens).status == "ok"
    dropped = fit(tokens.total_tokens - 1, "drop")
    assert (
        dropped.status == "dropped"
        and dropped.reason == f"seq_len: {tokens.total_tokens} tokens > {tokens.total_tokens - 1}"
    )
    # truncation keeps the visual span whole and at least one supervised token
    cut = fit(lay.first_supervised + 1)
    assert cut.status == "truncated" and cut.total_tokens == lay.first_supervised + 1
    assert cut.text_tokens == cut.total_tokens - tokens.visual_tokens
    assert cut.truncated_tokens == tokens.total_tokens - cut.total_tokens
    no_answer = fit(lay.first_supervised)
    assert no_answer.status == "dropped" and no_answer.reason is not None
    assert no_answer.reason.startswith("seq_len:") and "no supervised token" in no_answer.reason
    # a trainer that shifts its labels before it cuts (Bridge) still trains the token right after the cut
    reach = fit_seq_len(tokens, lay.first_supervised, mode="truncate", layout=lay, label_reach=1)
    assert reach.status == "truncated" and reach.total_tokens == lay.first_supervised
    gone = fit_seq_len(tokens, lay.first_supervised - 1, mode="truncate", layout=lay, label_reach=1)
    assert gone.status == "dropped"
    visual_cut = fit(lay.last_visual_end - 1)
    assert visual_cut.status == "dropped" and visual_cut.reason is not None
    assert visual_cut.reason.startswith("seq_len:") and "last visual span" in visual_cut.reason
    with pytest.raises(ValueError, match="mode"):
        fit(10, "chop")


@needs_qwen_vocab
def test_seq_len_truncate_qwen3_video_groups(q3: ModelPreset, qwen_tok: TextTokenizer) -> None:
    idx = sample_video_frames(q3, 300, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=720, width=1280, indices=idx, video_fps=30.0)
    msgs = [
        {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Summarise."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Nothing moves."}]},
    ]
    sample = TokenInput(msgs, [], [spec], q3, qwen_tok, bounds_of(q3))
    lay = ProcessorFeed().layout(sample)
    total = sample.checked().total_tokens
    assert lay.total == total
    # after the last group's <|vision_end|> come "Summarise.<|im_end|>\n<|im_start|>assistant\n"
    tail = qwen_tok.count("Summarise.<|im_end|>\n<|im_start|>assistant\n")
    assert lay.first_supervised == lay.last_visual_end + tail


# --------------------------------------------------------------------------- transformers cross-check


def _hf() -> Any:
    try:
        import transformers
    except ImportError:
        pytest.skip("transformers is not installed")
    return transformers


@pytest.mark.slow
def test_cross_check_transformers_processors() -> None:
    """A few hundred random sizes against transformers' own processors (where the installed version has the
    method): Qwen2/2.5 and Qwen3 images, Qwen3 videos, HF InternVL (GotOcr2) tiles, LLaVA-NeXT anyres."""
    import numpy as np

    _hf()
    from transformers.models.got_ocr2 import image_processing_pil_got_ocr2 as got
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as q2img

    rng = np.random.default_rng(11)
    sizes = [
        (int(h), int(w))
        for h, w in zip(rng.integers(16, 4000, 300), rng.integers(16, 4000, 300), strict=True)
    ]
    sizes = [(h, w) for h, w in sizes if max(h, w) / min(h, w) <= 200]
    q25, q3 = load_preset("qwen2_5_vl"), load_preset("qwen3_vl")
    hf25 = q2img.Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    hf25_mb = q2img.Qwen2VLImageProcessorPil(min_pixels=200704, max_pixels=1003520)
    hf3 = q2img.Qwen2VLImageProcessorPil(
        patch_size=16, size={"shortest_edge": 65536, "longest_edge": 16777216}
    )
    for h, w in sizes:
        assert image_tokens_of(q25, h, w).tokens == hf25.get_number_of_image_patches(h, w) // 4, (h, w)
        assert image_tokens_of(q25, h, w, **MB).tokens == hf25_mb.get_number_of_image_patches(h, w) // 4, (
            h,
            w,
        )
        assert image_tokens_of(q3, h, w).tokens == hf3.get_number_of_image_patches(h, w) // 4, (h, w)

    internvl_hf = load_preset("internvl", tiling={"multi_image": "per_image"})
    hf_tiles = got.GotOcr2ImageProcessorPil(
        crop_to_patches=True, min_patches=1, max_patches=12, size={"height": 448, "width": 448}
    )
    for h, w in sizes:
        assert image_tokens_of(internvl_hf, h, w).tiles == hf_tiles.get_number_of_image_patches(h, w), (h, w)

    try:
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    except ImportError:
        Qwen3VLVideoProcessor = None  # noqa: N806
    if Qwen3VLVideoProcessor is not None and hasattr(Qwen3VLVideoProcessor, "get_num_of_video_patches"):
        vp = Qwen3VLVideoProcessor(size={"shortest_edge": 4096, "longest_edge": 25165824})
        for (h, w), n in zip(sizes[:100], rng.integers(2, 200, 100).tolist(), strict=True):
            if h < 32 or w < 32:
                continue
            ours = video_tokens_of(q3, n, h, w, indices=list(range(n)), video_fps=24.0).tokens
            assert ours == vp.get_num_of_video_patches(n, h, w) // 4, (n, h, w)

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlavaNextProcessor, PreTrainedTokenizerFast
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    tok = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<image>"])
    nxt = load_preset("llava_next")
    assert nxt.anyres is not None
    proc = LlavaNextProcessor(
        image_processor=LlavaNextImageProcessorPil(
            image_grid_pinpoints=[list(p) for p in nxt.anyres.grid_pinpoints],
            size={"shortest_edge": 336},
            crop_size={"height": 336, "width": 336},
        ),
        tokenizer=PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>"),
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        image_token="<image>",
    )
    want = proc._get_num_multimodal_tokens(image_sizes=sizes).num_image_tokens
    assert [image_tokens_of(nxt, h, w).tokens for h, w in sizes] == want
