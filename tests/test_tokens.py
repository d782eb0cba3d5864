"""Golden values of /work/shared/reference/visual-tokens.md §9 (Qwen rows), tokenizer and template checks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from vlmforge.schemas.presets import ModelPreset, list_presets, load_preset
from vlmforge.tasks.tokens import (
    IMAGE_PLACEHOLDER,
    VIDEO_PLACEHOLDER,
    AspectRatioError,
    TextTokenizer,
    VideoSpec,
    VideoTooShortError,
    _qvu_smart_resize,
    count_sample_tokens,
    image_tokens,
    render_chat,
    sample_video_frames,
    smart_resize,
    timestamp_text,
    video_timestamps,
    video_tokens,
)

MB = {"min_pixels": 200704, "max_pixels": 1003520}  # Megatron-Bridge QwenVL task encoder defaults
SIZES = [(1080, 1920), (480, 640), (4000, 3000), (224, 224), (28, 5000)]  # H x W

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
    assert [image_tokens(q25, h, w).tokens for h, w in SIZES] == [2691, 391, 15301, 64, 179]
    assert [image_tokens(q25, h, w, **MB).tokens for h, w in SIZES] == [1222, 391, 1230, 256, 428]
    # processor class default 3136 / 1003520: only max_pixels overridden
    assert image_tokens(q25, 1080, 1920, max_pixels=1003520).tokens == 1222


def test_qwen3_images_hub_and_mb(q3: ModelPreset) -> None:
    assert [image_tokens(q3, h, w).tokens for h, w in SIZES] == [2040, 300, 11750, 64, 156]
    assert [image_tokens(q3, h, w, **MB).tokens for h, w in SIZES] == [943, 300, 972, 196, 376]


def test_image_tokens_grid_consistency(q3: ModelPreset) -> None:
    r = image_tokens(q3, 1080, 1920)
    assert r.resized_height % 32 == 0 and r.resized_width % 32 == 0
    assert r.tokens == (r.resized_height // 16) * (r.resized_width // 16) // 4
    # idempotent: resizing the stored (resized) size again changes nothing
    again = image_tokens(q3, r.resized_height, r.resized_width)
    assert (again.resized_height, again.resized_width, again.tokens) == (
        r.resized_height,
        r.resized_width,
        r.tokens,
    )


def test_bridge_double_resize(q25: ModelPreset, q3: ModelPreset) -> None:
    # qwen-vl-utils image pre-resize at factor 28 (4..16384 tokens), then the processor with Bridge min/max
    pre = _qvu_smart_resize(1984, 1498, 28, 4 * 28 * 28, 16384 * 28 * 28, 200)
    assert pre == (1988, 1512)
    assert (image_tokens(q3, 1984, 1498, **MB).tokens, image_tokens(q3, *pre, **MB).tokens) == (972, 945)
    assert (image_tokens(q25, 1984, 1498, **MB).tokens, image_tokens(q25, *pre, **MB).tokens) == (1271, 1271)


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
        image_tokens(q25, 2500, 10)
    with pytest.raises(AspectRatioError):
        smart_resize(0, 100, 28, 3136, 12845056)
    assert smart_resize(10, 2000, 28, 3136, 12845056)  # ratio exactly 200 is allowed


# ------------------------------------------------------------------------------------------- videos


def test_qwen_vl_utils_video_7200(q25: ModelPreset) -> None:
    idx = sample_video_frames(q25, 300, 30.0)  # 10 s @ 30 fps
    assert len(idx) == 20 and idx[0] == 0 and idx[-1] == 299
    v = video_tokens(q25, len(idx), 720, 1280)
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
    v = video_tokens(q3, len(idx), 720, 1280, indices=idx, video_fps=30.0)
    assert (v.resized_height, v.resized_width, v.grid_t, v.tokens) == (704, 1280, 10, 8800)
    # block replacing the 3-token placeholder: 10 x (6 + 2 + 880) = 8880
    assert 3 + v.extra_text_tokens + v.tokens == 8880


def test_qwen3_video_needs_indices(q3: ModelPreset) -> None:
    with pytest.raises(ValueError, match="indices"):
        video_tokens(q3, 20, 720, 1280)
    with pytest.raises(ValueError):
        video_tokens(q3, 20, 720, 1280, indices=[0, 1, 2], video_fps=30.0)


def test_qwen3_sample_frames_short_clip(q3: ModelPreset) -> None:
    assert sample_video_frames(q3, 7, 30.0) == [0, 2, 4, 6]  # min_frames 4, capped at T
    assert sample_video_frames(q3, 3, 30.0) == [0, 1, 2]  # capped at T (odd, the processor pads)
    v = video_tokens(q3, 3, 256, 256, indices=[0, 1, 2], video_fps=30.0)
    assert v.grid_t == 2


def test_video_too_short(q25: ModelPreset, q3: ModelPreset) -> None:
    for preset in (q25, q3):
        with pytest.raises(VideoTooShortError):
            sample_video_frames(preset, 1, 30.0)
        with pytest.raises(ValueError):
            sample_video_frames(preset, 0, 30.0)
    with pytest.raises(VideoTooShortError):
        video_tokens(q3, 1, 720, 1280, indices=[0], video_fps=30.0)
    assert sample_video_frames(q25, 2, 30.0) == [0, 1]


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
    assert video_tokens(q25, len(uni), 720, 1280).tokens < video_tokens(q25, len(full), 720, 1280).tokens
    with pytest.raises(ValueError):
        sample_video_frames(q25, 300, 30.0, max_num_frames=1)
    with pytest.raises(ValueError):
        sample_video_frames(q25, 300, 30.0, max_num_frames=8, mode="drop")  # type: ignore[arg-type, unused-ignore]


def test_video_max_pixels_knob(q25: ModelPreset, q3: ModelPreset) -> None:
    v = video_tokens(q25, 20, 720, 1280, max_pixels=200704)
    assert v.resized_height * v.resized_width <= 200704
    idx = sample_video_frames(q3, 300, 30.0)
    v3 = video_tokens(q3, 20, 720, 1280, indices=idx, video_fps=30.0, max_pixels=200704)
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
    one = count_sample_tokens(_sample(1), q25, qwen_tok, [(480, 640)], [])
    assert one.per_image == [391] and one.per_video == []
    assert one.total_tokens == one.text_tokens + one.visual_tokens and one.visual_tokens == 391
    text, _, _ = render_chat(_sample(1), q25)
    assert one.text_tokens == qwen_tok.count(text) - 1
    two = count_sample_tokens(_sample(2), q25, qwen_tok, [(480, 640), (1080, 1920)], [])
    assert two.per_image == [391, 2691]
    assert two.total_tokens - one.total_tokens == 2691 + 2  # its pads + vision_start/vision_end
    # max_pixels knob applies to every image
    mb = count_sample_tokens(_sample(2), q25, qwen_tok, [(480, 640), (1080, 1920)], [], max_pixels=1003520)
    assert mb.per_image == [391, 1222] and mb.text_tokens == two.text_tokens
    with pytest.raises(ValueError):
        count_sample_tokens(_sample(2), q25, qwen_tok, [(480, 640)], [])


@needs_qwen_vocab
def test_count_sample_tokens_videos(q25: ModelPreset, q3: ModelPreset, qwen_tok: TextTokenizer) -> None:
    idx = sample_video_frames(q3, 300, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=720, width=1280, indices=idx, video_fps=30.0)
    base3 = count_sample_tokens(_sample(0), q3, qwen_tok, [], [])
    with_video3 = count_sample_tokens(_sample(0, video=True), q3, qwen_tok, [], [spec])
    assert with_video3.per_video == [8800]
    assert with_video3.total_tokens - base3.total_tokens == 8880  # 10 x (timestamp 6 + 2 wrappers + 880 pads)
    assert with_video3.total_tokens == with_video3.text_tokens + with_video3.visual_tokens

    spec25 = VideoSpec(n_sampled_frames=20, height=720, width=1280)
    base25 = count_sample_tokens(_sample(0), q25, qwen_tok, [], [])
    with_video25 = count_sample_tokens(_sample(0, video=True), q25, qwen_tok, [], [spec25])
    assert with_video25.per_video == [7200]
    assert with_video25.total_tokens - base25.total_tokens == 7200 + 2  # no timestamp text for Qwen2.5


@needs_qwen_vocab
def test_count_sample_tokens_timestamp_merges_with_text(q3: ModelPreset, qwen_tok: TextTokenizer) -> None:
    # text parts are concatenated as-is: "Look:" + "<0.3 seconds>" tokenizes ":<" as one token
    idx = sample_video_frames(q3, 300, 30.0)
    spec = VideoSpec(n_sampled_frames=len(idx), height=720, width=1280, indices=idx, video_fps=30.0)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Look:"}, {"type": "video"}]}]
    got = count_sample_tokens(msgs, q3, qwen_tok, [], [spec])
    text, _, n_vid = render_chat(msgs, q3)
    stamps = video_timestamps(idx, 30.0)
    expanded = text.replace(VIDEO_PLACEHOLDER, "".join(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps))
    assert got.text_tokens == qwen_tok.count(expanded) - len(stamps)  # one pad per group in `expanded`
    v = video_tokens(q3, len(idx), 720, 1280, indices=idx, video_fps=30.0)
    no_merge = qwen_tok.count(text) - n_vid + v.extra_text_tokens + 1
    assert got.text_tokens == no_merge - 1
    assert got.total_tokens == got.text_tokens + 8800
