"""The knobs (Megatron-Bridge names): filters that drop a sample the training run would not take.

A knob is a function of the sample and the run's model and knobs (``TokenOptions``) returning None (keep) or a
drop reason built with :func:`~vlmforge.schemas.reasons.reason` whose code is the knob's name. Record knobs
look at the parsed record and run before any media work (a dropped sample costs nothing); token knobs look at
the counted sample. Adding a knob is one entry in :data:`RECORD_KNOBS` or :data:`TOKEN_KNOBS` (in the order
they apply), its config field (a ``BATCH_INPUTS`` sub-model, so it is fingerprinted; its ``description`` makes
it a CLI option, flows/cli/options.py) and its reason code."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from ...schemas.config import TokenOptions
from ...schemas.reasons import reason
from ...schemas.records import Record
from .tokens_step import CountedSample

RecordKnob = Callable[[Record, TokenOptions], str | None]
TokenKnob = Callable[[CountedSample, TokenOptions], str | None]


def n_images(record: Record) -> int:
    return sum(1 for m in record.media if m.kind == "image")


def max_num_images(record: Record, knobs: TokenOptions) -> str | None:
    limit, n = knobs.max_num_images, n_images(record)
    return reason("max_num_images", f"{n} images > {limit}") if limit is not None and n > limit else None


def max_media_per_sample(record: Record, knobs: TokenOptions) -> str | None:
    """The default cap on a sample's media references (images and videos, repeats counted): one line naming
    one image 20,000 times would otherwise publish a sample of hundreds of MB."""
    limit, n = knobs.max_media_per_sample, len(record.media)
    return reason("max_media_per_sample", f"{n} media > {limit}") if limit is not None and n > limit else None


def max_visual_tokens(sample: CountedSample, knobs: TokenOptions) -> str | None:
    limit, n = knobs.max_visual_tokens, sample.tokens.visual_tokens
    return reason("max_visual_tokens", f"{n} > {limit}") if limit is not None and n > limit else None


def seq_len(sample: CountedSample, knobs: TokenOptions) -> str | None:
    """``--seq-len``: the fit names the knob in its reason (tasks/tokens/seq_len.py)."""
    return sample.fit.reason if sample.fit.status == "dropped" else None


RECORD_KNOBS: Final[Mapping[str, RecordKnob]] = {
    "max_media_per_sample": max_media_per_sample,
    "max_num_images": max_num_images,
}
TOKEN_KNOBS: Final[Mapping[str, TokenKnob]] = {"max_visual_tokens": max_visual_tokens, "seq_len": seq_len}


def record_drop(record: Record, knobs: TokenOptions) -> str | None:
    """The reason of the first record knob that drops the sample (None: kept)."""
    return next((why for knob in RECORD_KNOBS.values() if (why := knob(record, knobs))), None)


def token_drop(sample: CountedSample, knobs: TokenOptions) -> str | None:
    """The reason of the first token knob that drops the counted sample (None: kept)."""
    return next((why for knob in TOKEN_KNOBS.values() if (why := knob(sample, knobs))), None)
