"""Text: the chat template rendered as the model's processor sees it, and the exact tokenizer that counts it.

Rendering (docs/visual-tokens.md §1): the model's Jinja chat template (transformers semantics, training form)
or the built-in ChatML renderer, with ONE placeholder per media item; the family (tasks/geometry/families)
says what a placeholder looks like. Tokenizing (docs/visual-tokens.md §7): the built-in Qwen2/2.5/3
vocabulary read from ``qwen.tiktoken``, or any Hugging Face ``tokenizer.json``. Tokenizer files and
templates are read and compiled once per process.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...schemas.presets import ModelPreset
from ..errors import ConfigError
from ..geometry import family_of

__all__ = ["TextTokenizer", "render_chat", "render_jinja"]

# --------------------------------------------------------------------------------------------------
# Text tokenizer
# --------------------------------------------------------------------------------------------------

_QWEN2_PAT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPECIALS = [  # ids from 151643 upward, in this order (docs/visual-tokens.md §7)
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
    "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",  # Qwen3: 151665-151668
]  # fmt: skip
_QWEN2_FIRST_SPECIAL = 151643


@functools.lru_cache(maxsize=1)
def _qwen2_ranks() -> dict[bytes, int]:
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
    return ranks


@functools.lru_cache(maxsize=4)
def _qwen2_encoding(specials: tuple[str, ...] = tuple(_QWEN2_SPECIALS)) -> Any:
    """tiktoken encoder over qwen.tiktoken; ``specials`` get ids from 151643 upward in order (the ids never
    change a count, only which strings are single tokens)."""
    import tiktoken

    table = {tok: _QWEN2_FIRST_SPECIAL + i for i, tok in enumerate(specials)}
    return tiktoken.Encoding(
        "qwen2", pat_str=_QWEN2_PAT, mergeable_ranks=_qwen2_ranks(), special_tokens=table
    )


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
    def builtin_qwen2(cls, special_tokens: Sequence[str] | None = None) -> TextTokenizer:
        """Qwen2/2.5/3 vocabulary from dashscope's ``qwen.tiktoken`` + the Qwen2-VL/Qwen3 special tokens
        (or ``special_tokens``, e.g. Qwen2.5's plus InternVL's added ``<img>``, ``</img>``,
        ``<IMG_CONTEXT>``).

        Where it comes from: ``qwen.tiktoken`` holds the 151,643 byte-level BPE ranks of
        Qwen/Qwen2/Qwen2.5/Qwen3 (the same merges as the hub ``tokenizer.json``); it ships inside Alibaba's
        official ``dashscope`` wheel (Apache-2.0) and is read as a file, the SDK is never imported. The
        split regex and the NFC normalizer are those of the hub ``tokenizer.json``; special tokens split the
        text first, as ``tokenizers`` does for added tokens. Checked ids: reference sheet §7."""
        specials = tuple(_QWEN2_SPECIALS) if special_tokens is None else tuple(special_tokens)
        enc = _qwen2_encoding(specials)
        name = "qwen2" if special_tokens is None else f"qwen2+{len(specials)}"

        def encode(text: str) -> list[int]:
            ids: list[int] = enc.encode(unicodedata.normalize("NFC", text), allowed_special="all")
            return ids

        return cls(encode, name)

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
    def for_preset(cls, preset: ModelPreset, path: str | Path | None = None) -> TextTokenizer:
        """The tokenizer for ``preset``: ``path`` (a tokenizer.json or a model folder) when given, else
        ``preset.tokenizer`` ("qwen2" = built-in, with ``preset.special_tokens``; a path = that file).

        Raises ConfigError for a preset that ships no vocabulary (LLaVA, Nemotron VL) and no ``path``."""
        if path is not None:
            return cls.from_path(path)
        if preset.tokenizer is None:
            raise ConfigError(
                f"model preset {preset.name!r} ships no tokenizer (its vocabulary cannot be bundled "
                "offline): pass --tokenizer with the model's tokenizer.json or a local model folder"
            )
        if preset.tokenizer == "qwen2":
            return cls.builtin_qwen2(preset.special_tokens)
        return cls.from_path(preset.tokenizer)


# --------------------------------------------------------------------------------------------------
# Chat template
# --------------------------------------------------------------------------------------------------


def render_chat(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    """Render the model's chat template (training form, no generation prompt), one placeholder per media item.

    ``preset.chat_template`` (Jinja, e.g. from a model folder) when set; otherwise the built-in ChatML
    renderer (Qwen, InternVL): ``preset.default_system`` first when the first message is not a system
    message, then
    ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message with each image / video part written as the
    family's placeholder (+ ``text.image_suffix`` / ``text.video_suffix``).

    Returns (text, n_image_placeholders, n_video_placeholders).
    """
    if preset.chat_template is not None:
        return _render_template(messages, preset)
    return _render_chatml(messages, preset)


def _render_chatml(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    img_ph, vid_ph = family_of(preset).placeholders(preset)
    if preset.text is not None:
        img_ph += preset.text.image_suffix
        vid_ph += preset.text.video_suffix
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
                    out.append(img_ph)
                    n_img += 1
                elif kind == "video":
                    out.append(vid_ph)
                    n_vid += 1
                else:
                    raise ValueError(f"unknown content part type {kind!r}")
        out.append("<|im_end|>\n")
    return "".join(out), n_img, n_vid


def _render_template(messages: Sequence[Mapping[str, Any]], preset: ModelPreset) -> tuple[str, int, int]:
    assert preset.chat_template is not None
    n_img, n_vid = _count_media_parts(messages)
    specials = {"bos_token": preset.text.bos_token} if preset.text is not None else {}
    text = render_jinja(preset.chat_template, messages, **specials)
    got_img, got_vid = family_of(preset).count_placeholders(text, preset)
    if (got_img, got_vid) != (n_img, n_vid):
        raise ValueError(
            f"the chat template wrote {got_img} image / {got_vid} video placeholder(s) for "
            f"{n_img} image / {n_vid} video part(s)"
        )
    return text, n_img, n_vid


def _count_media_parts(messages: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    n_img = n_vid = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                kind = part.get("type")
                if kind == "image":
                    n_img += 1
                elif kind == "video":
                    n_vid += 1
                elif kind != "text":
                    raise ValueError(f"unknown content part type {kind!r}")
    return n_img, n_vid


@functools.lru_cache(maxsize=16)
def _compile_template(source: str) -> Any:
    """Compile a chat template the way transformers' ``_compile_jinja_template`` does: sandboxed,
    ``trim_blocks`` + ``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag, ``tojson``,
    ``raise_exception`` and ``strftime_now``."""
    import json
    from datetime import datetime

    from jinja2 import nodes
    from jinja2.exceptions import TemplateError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(Extension):  # transformers' AssistantTracker, without the index bookkeeping
        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_support"), [], [], body).set_lineno(lineno)

        def _support(self, caller: Callable[[], str]) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: Any = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def render_jinja(source: str, messages: Sequence[Mapping[str, Any]], **special_tokens: str) -> str:
    """Render a Hugging Face chat template (training form: ``add_generation_prompt=False``).

    A template error (``raise_exception``, a bad role order...) becomes a ValueError naming it."""
    from jinja2.exceptions import TemplateError

    try:
        text: str = _compile_template(source).render(
            messages=list(messages), add_generation_prompt=False, tools=None, documents=None, **special_tokens
        )
    except TemplateError as exc:
        raise ValueError(f"chat template error: {exc}") from exc
    return text
