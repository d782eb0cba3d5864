"""The ``--seq-len`` knob: drop what cannot fit, or truncate text only after the last visual token.

Megatron-Bridge's unpacked collate truncates every sequence to ``seq_length`` wherever it ends, so it can
cut a visual span (the pads of an image then no longer match its features) and, with PP>1 and a constant
sequence length, silently lose visual tokens; PR #3691 only checks that the visual tokens alone fit.

Here a sample longer than ``seq_len`` is either dropped (``mode="drop"``, the default) or kept for
truncation (``mode="truncate"``) when the cut falls after the end of its last visual span AND at least one
supervised (assistant) token stays before the cut (or, where the trainer shifts its labels before it
cuts, right after it: ``label_reach``); otherwise it is dropped. A drop's reason names the knob.

What "truncate" records: the sample keeps its full record; ``total_tokens`` becomes ``seq_len`` and
``text_tokens`` drops by the cut, which is the sequence a loader truncating to ``seq_len`` trains on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ...schemas.reasons import reason
from ..geometry import ExpandedText
from .count import SampleTokens
from .text import TextTokenizer

__all__ = [
    "SeqLenFit",
    "SeqLenMode",
    "SequenceLayout",
    "fit_seq_len",
    "layout_of",
    "needs_layout",
]

SeqLenMode = Literal["drop", "truncate"]

_MARK = "\x00vlmforge-supervised\x00"


@dataclass(frozen=True)
class SequenceLayout:
    """Where the parts of a sample's token sequence sit (0-based token positions)."""

    total: int
    # tokens up to and including the end wrapper of the last visual span (0 without media)
    last_visual_end: int
    # position of the first supervised token (the first assistant message's content); None when there is none.
    # Counted from a prefix ending at the assistant header: when the header's last character merges with the
    # answer's first token (``"ASSISTANT: "`` + ``"A"``) it is one too high, i.e. conservative.
    first_supervised: int | None


@dataclass(frozen=True)
class SeqLenFit:
    """Outcome of the knob for one sample."""

    status: Literal["ok", "truncated", "dropped"]
    reason: str | None  # set when dropped; names the knob ("seq_len: ...")
    text_tokens: int  # after truncation
    total_tokens: int  # after truncation (<= seq_len unless dropped)
    truncated_tokens: int = 0


def _tokens_before(exp: ExpandedText, tokenizer: TextTokenizer, offset: int) -> int:
    """Sequence position of character ``offset`` of ``exp.text``: prefix tokens with every pad before it
    replaced by the visual tokens it stands for."""
    spans = [k for k, end in enumerate(exp.span_ends) if end <= offset]
    return tokenizer.count(exp.text[:offset]) - len(spans) + sum(exp.span_tokens[k] for k in spans)


def _with_marker(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """A copy of ``messages`` whose first assistant content starts with the marker (None: no assistant
    text)."""
    out: list[dict[str, Any]] = []
    marked = False
    for message in messages:
        msg = dict(message)
        if not marked and msg.get("role") == "assistant":
            content = msg.get("content")
            if isinstance(content, str) and content:
                msg["content"] = _MARK + content
                marked = True
            elif isinstance(content, list) and content:
                parts = [dict(p) for p in content]
                first = parts[0]
                if first.get("type") == "text":
                    first["text"] = _MARK + (first.get("text") or "")
                else:
                    parts.insert(0, {"type": "text", "text": _MARK})
                msg["content"] = parts
                marked = True
        out.append(msg)
    return out if marked else None


def layout_of(
    expand: Callable[[Sequence[Mapping[str, Any]]], ExpandedText],
    messages: Sequence[Mapping[str, Any]],
    tokenizer: TextTokenizer,
) -> SequenceLayout:
    """Token positions of the end of the last visual span and of the first supervised token of the sequence
    ``expand`` makes of ``messages`` (the fed sequence of a feed path, or the processor's).

    Visual spans end in a special token (``<|vision_end|>``, ``</img>``, ``<image>``), so the prefix up to the
    last one tokenizes exactly as it does inside the whole sequence."""
    exp = expand(messages)
    total = tokenizer.count(exp.text) - exp.pads + exp.visual_tokens
    last_visual_end = _tokens_before(exp, tokenizer, exp.span_ends[-1]) if exp.span_ends else 0
    first_supervised: int | None = None
    marked = _with_marker(messages)
    if marked is not None:
        mexp = expand(marked)
        at = mexp.text.find(_MARK)
        if at >= 0 and mexp.text.replace(_MARK, "", 1) == exp.text:
            first_supervised = _tokens_before(exp, tokenizer, at)
    return SequenceLayout(total=total, last_visual_end=last_visual_end, first_supervised=first_supervised)


def needs_layout(tokens: SampleTokens, seq_len: int | None, mode: SeqLenMode) -> bool:
    """Whether :func:`fit_seq_len` needs the sample's layout (a too-long sample in truncate mode)."""
    return mode == "truncate" and seq_len is not None and tokens.total_tokens > seq_len


def fit_seq_len(
    tokens: SampleTokens,
    seq_len: int | None,
    *,
    mode: SeqLenMode = "drop",
    layout: SequenceLayout | None = None,
    label_reach: int = 0,
) -> SeqLenFit:
    """Apply ``--seq-len`` to one counted sample. ``layout`` is needed only when ``mode == "truncate"`` and
    the sample is too long (:func:`needs_layout`; a feed path's ``layout`` computes it). ``label_reach``: how
    many tokens past the cut still train as targets (1 where the trainer shifts its labels before it cuts,
    as Megatron-Bridge's collate does: the token right after the cut is the last position's target)."""
    text, total = tokens.text_tokens, tokens.total_tokens
    if seq_len is None or total <= seq_len:
        return SeqLenFit("ok", None, text, total)
    if mode == "drop":
        return SeqLenFit("dropped", reason("seq_len", f"{total} tokens > {seq_len}"), text, total)
    if mode != "truncate":
        raise ValueError(f"unknown seq_len mode {mode!r}; expected 'drop' or 'truncate'")
    if layout is None:
        raise ValueError("truncate mode needs the sample's sequence layout")
    if layout.last_visual_end > seq_len:
        return SeqLenFit(
            "dropped",
            reason(
                "seq_len",
                f"{total} tokens > {seq_len} and the last visual span ends at token "
                f"{layout.last_visual_end} (truncation would cut it)",
            ),
            text,
            total,
        )
    if layout.first_supervised is None or layout.first_supervised >= seq_len + label_reach:
        where = (
            ""
            if layout.first_supervised is None
            else f" (the first one is at token {layout.first_supervised})"
        )
        return SeqLenFit(
            "dropped",
            reason("seq_len", f"{total} tokens > {seq_len} and no supervised token would remain{where}"),
            text,
            total,
        )
    cut = total - seq_len
    return SeqLenFit("truncated", None, text - cut, seq_len, truncated_tokens=cut)
