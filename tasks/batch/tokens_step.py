"""The batch's token step: a sample's exact token counts for the run's model, and how it fits ``--seq-len``.

The model preset and the text tokenizer are cached per worker process (building a tokenizer costs ~1 s);
the seq_len fit is worked out only when a knob asks for it (:attr:`CountedSample.fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from ...schemas.config import TokenOptions
from ...schemas.records import Record
from ...schemas.rows import MediaRow
from ..geometry import ModelGeometry, load_preset
from ..tokens import (
    FEED_PATHS,
    SampleTokens,
    SeqLenFit,
    TextTokenizer,
    TokenInput,
    fit_seq_len,
    needs_layout,
)
from .media_step import SampleMedia


@lru_cache(maxsize=4)
def _tokenizer(model: str, model_dir: str | None, path: str | None) -> TextTokenizer:
    return TextTokenizer.for_preset(load_preset(model, model_dir), path or model_dir)


def get_tokenizer(tokens: TokenOptions) -> TextTokenizer:
    """The run's text tokenizer (cached per worker process: building one costs ~1 s)."""
    return _tokenizer(tokens.model, tokens.model_dir, tokens.tokenizer)


@dataclass
class CountedSample:
    """A sample with its token counts: what the token knobs look at. ``tokens`` are what the trainer's
    per-sample check counts (the processor on the stored pixels: ``max_visual_tokens``), ``fed`` what its
    batch path feeds the model (``--seq-len`` and the manifests' token columns)."""

    step: TokenStep
    record: Record
    media: SampleMedia
    inputs: TokenInput  # what both counts were made from
    tokens: SampleTokens
    fed: SampleTokens

    @cached_property
    def fit(self) -> SeqLenFit:
        """How the sample fits ``--seq-len`` (``--seq-len-mode truncate`` may cut its text)."""
        return self.step.fit(self)


class TokenStep:
    def __init__(self, tokens: TokenOptions, geometry: ModelGeometry, tokenizer: TextTokenizer) -> None:
        self.options, self.tokenizer = tokens, tokenizer
        self.preset, self.bounds = geometry.preset, geometry.bounds
        self.feed = FEED_PATHS[tokens.feed_path]

    def count(self, record: Record, media: SampleMedia) -> CountedSample:
        """Count the sample's tokens and write each media row's visual tokens. ``ValueError`` when they
        cannot be counted (e.g. a video too short for the model's temporal patch)."""
        sample = TokenInput(
            record.messages, media.image_sizes, media.videos, self.preset, self.tokenizer, self.bounds
        )
        tokens = sample.checked()
        fed = self.feed.fed(tokens, sample)
        _set_visual_tokens(media.rows, tokens, fed)
        return CountedSample(self, record, media, sample, tokens, fed)

    def fit(self, sample: CountedSample) -> SeqLenFit:
        """``--seq-len`` on the fed sequence; a truncation point is where the feed path puts it."""
        seq_len, mode = self.options.seq_len, self.options.seq_len_mode
        layout = None
        if needs_layout(sample.fed, seq_len, mode):
            layout = self.feed.layout(sample.inputs)
        return fit_seq_len(sample.fed, seq_len, mode=mode, layout=layout, label_reach=self.feed.label_reach)


def _set_visual_tokens(rows: list[MediaRow], checked: SampleTokens, fed: SampleTokens) -> None:
    per_kind = {"image": iter(fed.per_image), "video": iter(fed.per_video)}
    checked_kind = {"image": iter(checked.per_image), "video": iter(checked.per_video)}
    for row in rows:
        row.visual_tokens = next(per_kind[row.kind])
        row.encode_check_visual_tokens = next(checked_kind[row.kind])
