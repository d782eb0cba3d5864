"""The fetch stage: media bytes from wherever they live into the content store, one batch at a time
(:class:`FetchStream`), each reference through its recipe's sources in order; and the same sources sizing
references without their bodies for ``catalog --estimate`` (:data:`SOURCES`, :class:`SizingContext`). The
HTTP client is the ``http`` stage's, the archive readers the ``archives`` stage's."""

from __future__ import annotations

from .acquire import FetchStream, fetch_batch, read_outcome
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome, FetchStats, Located, outcome_columns
from .recipe_env import bind_environment, recipe_variables, variable_problems
from .release_media import MediaResolver, MissingMedia
from .sizing import DEFAULT_PROBE_SAMPLE, Miss, SizeAnswer, Sized, SizingContext
from .sources import SOURCES

__all__ = [
    "DEFAULT_PROBE_SAMPLE",
    "Miss",
    "SOURCES",
    "SizeAnswer",
    "Sized",
    "SizingContext",
    "FetchContext",
    "FetchKnobs",
    "FetchOutcome",
    "FetchStats",
    "FetchStream",
    "Located",
    "MediaResolver",
    "MissingMedia",
    "bind_environment",
    "fetch_batch",
    "outcome_columns",
    "read_outcome",
    "recipe_variables",
    "variable_problems",
]
