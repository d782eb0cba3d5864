"""Exact per-sample token counts for Qwen2-VL / Qwen2.5-VL / Qwen3-VL training samples, no model load.

Formulas: /work/shared/reference/visual-tokens.md (§1 counting rule, §2 Qwen resize / video / timestamps,
§7 tokenizer). Everything here is a pure function of its arguments (tokenizer files read once per process).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vlmforge.schemas.presets import ModelPreset

__all__ = [
    "IMAGE_PLACEHOLDER",
    "VIDEO_PLACEHOLDER",
    "AspectRatioError",
    "ImageTokens",
    "SampleTokens",
    "TextTokenizer",
    "VideoSpec",
    "VideoTokens",
    "VideoTooShortError",
    "count_sample_tokens",
    "image_tokens",
    "render_chat",
    "sample_video_frames",
    "smart_resize",
    "timestamp_text",
    "video_timestamps",
    "video_tokens",
]

VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
IMAGE_PLACEHOLDER = f"{VISION_START}{IMAGE_PAD}{VISION_END}"
VIDEO_PLACEHOLDER = f"{VISION_START}{VIDEO_PAD}{VISION_END}"

# transformers' fallback when a video has no fps metadata (Qwen3VLProcessor / VideoProcessor warn and use 24)
_DEFAULT_VIDEO_FPS = 24.0


class AspectRatioError(ValueError):
    """Image/frame side ratio above the model's limit (200 for Qwen), or a side of size 0."""


class VideoTooShortError(ValueError):
    """Video with fewer frames than one temporal patch (2 for Qwen)."""


# --------------------------------------------------------------------------------------------------
# Resize
# --------------------------------------------------------------------------------------------------


def _check_aspect(height: int, width: int, limit: float) -> None:
    if height <= 0 or width <= 0:
        raise AspectRatioError(f"image/frame has a side of size <= 0: height={height}, width={width}")
    if max(height, width) / min(height, width) > limit:
        raise AspectRatioError(
            f"aspect ratio must be at most {limit:g}, got {max(height, width) / min(height, width):g} "
            f"(height={height}, width={width})"
        )


def smart_resize(
    height: int,
    width: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
    *,
    aspect_ratio_limit: float = 200,
) -> tuple[int, int]:
    """transformers ``qwen2_vl.image_processing_qwen2_vl.smart_resize`` (4.57.1 == 5.25.0).

    Returns (resized_height, resized_width), multiples of ``factor``. Python ``round`` (ties to even); the
    shrink branch scales from the ORIGINAL area and clamps with ``max(factor, ...)`` after the floor; the grow
    branch does not.
    """
    _check_aspect(height, width, aspect_ratio_limit)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qvu_smart_resize(
    height: int, width: int, factor: int, min_pixels: float, max_pixels: float, aspect_ratio_limit: float
) -> tuple[int, int]:
    """qwen-vl-utils 0.0.14 ``smart_resize``: ``max(factor, ...)`` on the rounding, none after the floor."""
    if max_pixels < min_pixels:
        raise ValueError(
            f"max_pixels {max_pixels} must be >= min_pixels {min_pixels} (qwen-vl-utils asserts this)"
        )
    _check_aspect(height, width, aspect_ratio_limit)
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qwen3_video_resize(
    num_frames: int,
    height: int,
    width: int,
    temporal_factor: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
    aspect_ratio_limit: float,
) -> tuple[int, int]:
    """transformers ``qwen3_vl.video_processing_qwen3_vl.smart_resize``: budget over all frames (T*H*W)."""
    if num_frames < temporal_factor:
        raise VideoTooShortError(f"video has {num_frames} frame(s); at least {temporal_factor} are needed")
    _check_aspect(height, width, aspect_ratio_limit)
    if (
        height < factor or width < factor
    ):  # transformers 5.25 upscales tiny frames first (4.57.1 raised instead)
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(num_frames / temporal_factor) * temporal_factor
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((num_frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (num_frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


# --------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageTokens:
    tokens: int
    resized_height: int
    resized_width: int


def image_tokens(
    preset: ModelPreset,
    height: int,
    width: int,
    *,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
) -> ImageTokens:
    """Visual pad tokens of one image: ``(H / factor) * (W / factor)`` after ``smart_resize``.

    ``max_pixels`` / ``min_pixels`` override the preset (e.g. the Megatron-Bridge 200704 / 1003520 knobs).
    """
    lo = preset.min_pixels if min_pixels is None else min_pixels
    hi = preset.max_pixels if max_pixels is None else max_pixels
    if hi < lo:
        raise ValueError(f"max_pixels {hi} is below min_pixels {lo}")
    f = preset.factor
    rh, rw = smart_resize(height, width, f, lo, hi, aspect_ratio_limit=preset.aspect_ratio_limit)
    return ImageTokens(tokens=(rh // f) * (rw // f), resized_height=rh, resized_width=rw)


# --------------------------------------------------------------------------------------------------
# Video frame sampling
# --------------------------------------------------------------------------------------------------


def _np_linspace_round(start: float, stop: float, num: int) -> list[int]:
    """``np.linspace(start, stop, num).round().astype(int)``: float64 ``i * step + start``, last = stop,
    ties to even."""
    if num <= 0:
        return []
    if num == 1:
        return [round(start)]
    step = (stop - start) / (num - 1)
    values = [i * step + start for i in range(num - 1)] + [stop]
    return [round(v) for v in values]


def _torch_linspace_round(start: float, end: float, steps: int) -> list[int]:
    """``torch.linspace(start, end, steps).round().long()`` per the CPU scalar kernel (first half counted
    from ``start``, second half from ``end``), evaluated in float64 (torch: float32). For an even ``steps``
    the exact values are never ties; float32 vs float64 can only differ for clips of tens of thousands of
    frames (and then only the indices, never the token count)."""
    if steps <= 0:
        return []
    if steps == 1:
        return [round(start)]
    step = (end - start) / (steps - 1)
    halfway = steps // 2
    values = [start + step * i if i < halfway else end - step * (steps - i - 1) for i in range(steps)]
    return [round(v) for v in values]


def _qvu_nframes(preset: ModelPreset, total_frames: int, video_fps: float) -> int:
    """qwen-vl-utils 0.0.14 ``smart_nframes`` (fps mode; FRAME_FACTOR = temporal_patch_size = 2)."""
    ff = preset.temporal_patch_size
    min_frames = math.ceil(preset.min_frames / ff) * ff
    max_frames = math.floor(min(preset.max_frames, total_frames) / ff) * ff
    nframes = total_frames / video_fps * preset.fps
    nframes = min(min(max(nframes, min_frames), max_frames), total_frames)
    n = math.floor(nframes / ff) * ff
    if not ff <= n <= total_frames:
        raise VideoTooShortError(f"nframes should be in [{ff}, {total_frames}], got {n}")
    return n


def _qwen3_nframes(preset: ModelPreset, total_frames: int, video_fps: float) -> int:
    """transformers ``Qwen3VLVideoProcessor.sample_frames`` (fps mode)."""
    n = int(total_frames / video_fps * preset.fps)
    return min(max(n, preset.min_frames), preset.max_frames, total_frames)


def sample_video_frames(
    preset: ModelPreset,
    n_frames: int,
    video_fps: float,
    *,
    max_num_frames: int | None = None,
    mode: Literal["uniform", "truncate"] = "uniform",
) -> list[int]:
    """Indices of the frames the model's sampler takes from an ``n_frames`` video at ``video_fps``.

    qwen2/2.5 (``video_sampler="qwen_vl_utils"``): qwen-vl-utils 0.0.14, ``torch.linspace(0, T-1, n).round()``
    with an even ``n``. qwen3: transformers ``np.linspace(0, T-1, n).round()`` (``n`` may be odd; the
    processor pads). Then the ``max_num_frames`` knob, if the sampler returned more: ``"uniform"`` keeps an
    evenly spread subset (count rounded down to a multiple of the temporal patch size), ``"truncate"`` keeps
    the first ``max_num_frames`` (Megatron-Bridge ``QwenVLTaskEncoder``: ``v[:max_num_frames]``).
    """
    tps = preset.temporal_patch_size
    if n_frames < tps:
        raise VideoTooShortError(f"video has {n_frames} frame(s); at least {tps} are needed")
    if not video_fps > 0:
        raise ValueError(f"video_fps must be > 0, got {video_fps}")
    if preset.video_sampler == "qwen_vl_utils":
        n = _qvu_nframes(preset, n_frames, video_fps)
        indices = _torch_linspace_round(0, n_frames - 1, n)
    else:
        n = _qwen3_nframes(preset, n_frames, video_fps)
        indices = _np_linspace_round(0, n_frames - 1, n)

    if max_num_frames is None or len(indices) <= max_num_frames:
        return indices
    if mode == "truncate":
        if max_num_frames < 1:
            raise ValueError(f"max_num_frames must be >= 1, got {max_num_frames}")
        return indices[:max_num_frames]
    if mode == "uniform":
        keep = (max_num_frames // tps) * tps
        if keep < tps:
            raise ValueError(f"max_num_frames must be >= {tps} in uniform mode, got {max_num_frames}")
        return [indices[p] for p in _np_linspace_round(0, len(indices) - 1, keep)]
    raise ValueError(f"unknown max_num_frames mode {mode!r}; expected 'uniform' or 'truncate'")


# --------------------------------------------------------------------------------------------------
# Video tokens
# --------------------------------------------------------------------------------------------------


def video_timestamps(indices: Sequence[int], video_fps: float, temporal_patch_size: int = 2) -> list[float]:
    """``Qwen3VLProcessor._calculate_timestamps``: pad indices to a multiple of the temporal patch (repeat the
    last), seconds = index / fps, average the first and last frame of every temporal group."""
    idx = list(indices)
    if not idx:
        return []
    if len(idx) % temporal_patch_size:
        idx.extend([idx[-1]] * (temporal_patch_size - len(idx) % temporal_patch_size))
    secs = [i / video_fps for i in idx]
    return [
        (secs[i] + secs[i + temporal_patch_size - 1]) / 2 for i in range(0, len(secs), temporal_patch_size)
    ]


def timestamp_text(seconds: float) -> str:
    """Qwen3-VL per-group timestamp text, e.g. ``<12.3 seconds>``."""
    return f"<{seconds:.1f} seconds>"


def _timestamp_tokens(seconds: float) -> int:
    # Qwen vocab: "<", one token per digit and for ".", " seconds", ">" (reference §2.5)
    return 3 + len(f"{seconds:.1f}")


@dataclass(frozen=True)
class VideoTokens:
    """One video's tokens. For Qwen3 the expanded block is ``3 + extra_text_tokens + tokens`` long (it
    replaces the 3-token template placeholder). Caution: the §1 rule subtracts only the pad (1 per item), so
    relative to ``tokens(template) - n_placeholders`` a video adds ``extra_text_tokens + 1`` text tokens,
    assuming the first ``<`` does not merge with preceding text (``count_sample_tokens`` tokenizes in place
    and is always exact)."""

    tokens: int  # visual pad tokens
    # Qwen3: sum over groups of (timestamp + 2 wrappers), minus the 3 placeholder tokens; else 0
    extra_text_tokens: int
    grid_t: int
    resized_height: int
    resized_width: int


def _video_layout(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    max_pixels: int | None,
) -> tuple[int, int, int, int]:
    """(grid_t, per-group pad tokens, resized_height, resized_width)."""
    f = preset.factor
    tps = preset.temporal_patch_size
    limit = preset.aspect_ratio_limit
    if n_sampled < 1:
        raise VideoTooShortError(f"video has {n_sampled} sampled frame(s)")
    if preset.video_sampler == "qwen_vl_utils":
        # qwen-vl-utils fetch_video: per-frame budget from the token limits and the total budget over n frames
        n_even = math.ceil(n_sampled / tps) * tps
        min_px: float = preset.video_min_pixels
        cap: float = preset.video_max_pixels
        if preset.video_total_pixels is not None:
            cap = min(cap, preset.video_total_pixels / n_even * tps)
        max_px = max(cap, int(min_px * 1.05))
        if max_pixels is not None:
            max_px = min(max_pixels, max_px)
        rh, rw = _qvu_smart_resize(height, width, f, min_px, max_px, limit)
    else:
        if max_pixels is not None:
            # --max-pixels caps each stored frame; the model's all-frame budget then applies to those frames
            lo = min(preset.video_min_pixels, max_pixels)
            height, width = smart_resize(height, width, f, lo, max_pixels, aspect_ratio_limit=limit)
        rh, rw = _qwen3_video_resize(
            n_sampled, height, width, tps, f, preset.video_min_pixels, preset.video_max_pixels, limit
        )
    grid_t = math.ceil(n_sampled / tps)
    return grid_t, (rh // f) * (rw // f), rh, rw


def video_tokens(
    preset: ModelPreset,
    n_sampled: int,
    height: int,
    width: int,
    *,
    indices: Sequence[int] | None = None,
    video_fps: float | None = None,
    max_pixels: int | None = None,
) -> VideoTokens:
    """Tokens of one video of ``n_sampled`` frames (after sampling) of size ``height`` x ``width``.

    ``tokens = ceil(n / temporal_patch) * (H / factor) * (W / factor)``. For timestamp presets (Qwen3)
    ``indices`` (the sampled frame indices) are required and ``video_fps`` defaults to 24 as in transformers;
    ``extra_text_tokens = sum_groups(tokens("<t seconds>") + 2 wrappers) - 3`` with the Qwen vocab count
    ``tokens("<t seconds>") = 5 + integer digits`` (see ``VideoTokens`` for how it relates to the §1 rule).
    """
    grid_t, per_group, rh, rw = _video_layout(preset, n_sampled, height, width, max_pixels)
    extra = 0
    if preset.timestamps:
        stamps = _group_timestamps(preset, n_sampled, grid_t, indices, video_fps)
        extra = sum(_timestamp_tokens(t) + 2 for t in stamps) - 3
    return VideoTokens(
        tokens=grid_t * per_group, extra_text_tokens=extra, grid_t=grid_t, resized_height=rh, resized_width=rw
    )


def _group_timestamps(
    preset: ModelPreset, n_sampled: int, grid_t: int, indices: Sequence[int] | None, video_fps: float | None
) -> list[float]:
    if indices is None:
        raise ValueError(
            f"preset {preset.name!r} writes per-group timestamps: pass the sampled frame indices"
        )
    if len(indices) != n_sampled:
        raise ValueError(f"got {len(indices)} frame indices for {n_sampled} sampled frames")
    fps = _DEFAULT_VIDEO_FPS if video_fps is None else video_fps
    if not fps > 0:
        raise ValueError(f"video_fps must be > 0, got {fps}")
    stamps = video_timestamps(indices, fps, preset.temporal_patch_size)
    assert len(stamps) == grid_t
    return stamps


# --------------------------------------------------------------------------------------------------
# Text tokenizer
# --------------------------------------------------------------------------------------------------

_QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPECIALS = [  # ids from 151643 upward, in this order (reference §7)
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",  # Qwen3: 151665-151668
]  # fmt: skip
_QWEN2_FIRST_SPECIAL = 151643


@functools.lru_cache(maxsize=1)
def _qwen2_encoding() -> Any:
    import tiktoken

    spec = importlib.util.find_spec("dashscope")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the dashscope package (which ships qwen.tiktoken) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    ranks: dict[bytes, int] = {}
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != _QWEN2_FIRST_SPECIAL:
        raise RuntimeError(f"{path} holds {len(ranks)} ranks, expected {_QWEN2_FIRST_SPECIAL}")
    specials = {tok: _QWEN2_FIRST_SPECIAL + i for i, tok in enumerate(_QWEN2_SPECIALS)}
    return tiktoken.Encoding("qwen2", pat_str=_QWEN2_PAT, mergeable_ranks=ranks, special_tokens=specials)


@functools.lru_cache(maxsize=8)
def _hf_tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


class TextTokenizer:
    """Exact text tokenizer; special/added tokens in the text count as one token each."""

    def __init__(self, encode: Callable[[str], list[int]], name: str) -> None:
        self._encode = encode
        self.name = name

    def __repr__(self) -> str:
        return f"TextTokenizer({self.name!r})"

    def encode(self, text: str) -> list[int]:
        return self._encode(text)

    def count(self, text: str) -> int:
        return len(self._encode(text))

    @classmethod
    def builtin_qwen2(cls) -> TextTokenizer:
        """Qwen2/2.5/3 vocabulary from dashscope's ``qwen.tiktoken`` + the Qwen2-VL/Qwen3 special tokens."""
        enc = _qwen2_encoding()

        def encode(text: str) -> list[int]:
            return list(enc.encode(unicodedata.normalize("NFC", text), allowed_special="all"))

        return cls(encode, "qwen2")

    @classmethod
    def from_path(cls, path: str | Path) -> TextTokenizer:
        """A Hugging Face ``tokenizer.json`` (or a folder holding one), via the ``tokenizers`` package."""
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        tok = _hf_tokenizer(str(p.resolve()))

        def encode(text: str) -> list[int]:
            return list(tok.encode(text, add_special_tokens=False).ids)

        return cls(encode, str(p))

    @classmethod
    def for_preset(cls, preset: ModelPreset) -> TextTokenizer:
        """``preset.tokenizer``: "qwen2" = built-in, anything else = a tokenizer.json path."""
        if preset.tokenizer == "qwen2":
            return cls.builtin_qwen2()
        return cls.from_path(preset.tokenizer)


# --------------------------------------------------------------------------------------------------
# Chat template + sample count
# --------------------------------------------------------------------------------------------------


def render_chat(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    """Render the Qwen ChatML training template (no generation prompt), one placeholder per media item.

    Returns (text, n_image_placeholders, n_video_placeholders).
    """
    out: list[str] = []
    n_img = n_vid = 0
    if messages and messages[0].get("role") != "system" and preset.default_system is not None:
        out.append(f"<|im_start|>system\n{preset.default_system}<|im_end|>\n")
    for message in messages:
        out.append(f"<|im_start|>{message['role']}\n")
        content = message.get("content")
        if content is None:
            content = ""
        if isinstance(content, str):
            out.append(content)
        else:
            for part in content:
                kind = part.get("type")
                if kind == "text":
                    out.append(part.get("text") or "")
                elif kind == "image":
                    out.append(IMAGE_PLACEHOLDER)
                    n_img += 1
                elif kind == "video":
                    out.append(VIDEO_PLACEHOLDER)
                    n_vid += 1
                else:
                    raise ValueError(f"unknown content part type {kind!r}")
        out.append("<|im_end|>\n")
    return "".join(out), n_img, n_vid


@dataclass(frozen=True)
class VideoSpec:
    n_sampled_frames: int
    height: int
    width: int
    indices: Sequence[int] | None = None
    video_fps: float | None = None


@dataclass(frozen=True)
class SampleTokens:
    text_tokens: int  # everything that is not a visual pad (template, text, wrappers, timestamps)
    visual_tokens: int
    total_tokens: int
    per_image: list[int]
    per_video: list[int]


def count_sample_tokens(
    messages: Sequence[Mapping[str, Any]],
    preset: ModelPreset,
    tokenizer: TextTokenizer,
    image_sizes: Sequence[tuple[int, int]],
    videos: Sequence[VideoSpec],
    *,
    max_pixels: int | None = None,
) -> SampleTokens:
    """Exact sequence length of one sample (reference §1):
    ``tokens(template) - n_placeholders + sum(pads) + extra text``.

    ``image_sizes`` are (height, width) per image part in order, ``videos`` one spec per video part in order.
    For timestamp presets every video placeholder is expanded as Qwen3VLProcessor does (per group
    ``<t seconds><|vision_start|>`` pads ``<|vision_end|>``, here with one pad per group) and the result is
    tokenized, so the count stays exact when the text before a video merges with ``<`` (``":<"``, ``" <"``).
    """
    text, n_img, n_vid = render_chat(messages, preset)
    if n_img != len(image_sizes):
        raise ValueError(f"sample has {n_img} image part(s) but {len(image_sizes)} image size(s)")
    if n_vid != len(videos):
        raise ValueError(f"sample has {n_vid} video part(s) but {len(videos)} video spec(s)")
    if text.count(IMAGE_PAD) != n_img or text.count(VIDEO_PAD) != n_vid:
        raise ValueError("message text contains literal <|image_pad|> / <|video_pad|> tokens")

    per_image = [image_tokens(preset, h, w, max_pixels=max_pixels).tokens for h, w in image_sizes]
    per_video: list[int] = []
    if not preset.timestamps:
        for v in videos:
            per_video.append(
                video_tokens(preset, v.n_sampled_frames, v.height, v.width, max_pixels=max_pixels).tokens
            )
        text_tokens = tokenizer.count(text) - n_img - n_vid
    else:
        # Qwen3VLProcessor: each video placeholder becomes, per temporal group, "<t seconds>" start pads end
        chunks = text.split(VIDEO_PLACEHOLDER)
        pieces = [chunks[0]]
        n_group_pads = 0
        for v, chunk in zip(videos, chunks[1:], strict=True):
            grid_t, per_group, _, _ = _video_layout(preset, v.n_sampled_frames, v.height, v.width, max_pixels)
            stamps = _group_timestamps(preset, v.n_sampled_frames, grid_t, v.indices, v.video_fps)
            pieces.extend(timestamp_text(t) + VIDEO_PLACEHOLDER for t in stamps)
            pieces.append(chunk)
            per_video.append(grid_t * per_group)
            n_group_pads += grid_t
        text_tokens = tokenizer.count("".join(pieces)) - n_img - n_group_pads
    visual = sum(per_image) + sum(per_video)
    return SampleTokens(
        text_tokens=text_tokens,
        visual_tokens=visual,
        total_tokens=text_tokens + visual,
        per_image=per_image,
        per_video=per_video,
    )
