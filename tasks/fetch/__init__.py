"""The fetch stage: media bytes from wherever they live into the content store, one batch at a time
(:class:`FetchStream`), each reference through its recipe's sources in order; and the same sources sizing
references without their bodies for ``catalog --estimate`` (:data:`SOURCES`, :class:`SizingContext`)."""

from __future__ import annotations

from .acquire import FetchStream, fetch_batch, read_outcome
from .archive_members import normalize_member
from .client import HttpClient, HttpOptions
from .failures import MATCH_BUDGET, NO_SOURCE, FetchError
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome, FetchStats, Located, outcome_columns
from .ranges import FsRangeSource
from .recipe_env import bind_environment, recipe_variables, variable_problems
from .release_media import MediaResolver, MissingMedia
from .sizing import DEFAULT_PROBE_SAMPLE, Miss, SizeAnswer, Sized, SizingContext
from .sources import SOURCES
from .tar_format import iter_tar
from .zip_format import ZipEntry, ZipIndex, check_zip_entry, plan_ranges, read_zip_group, read_zip_index

__all__ = [
    "DEFAULT_PROBE_SAMPLE",
    "Miss",
    "SOURCES",
    "SizeAnswer",
    "Sized",
    "SizingContext",
    "FetchContext",
    "FetchError",
    "FetchKnobs",
    "FetchOutcome",
    "FetchStats",
    "FetchStream",
    "FsRangeSource",
    "MATCH_BUDGET",
    "HttpClient",
    "HttpOptions",
    "Located",
    "MediaResolver",
    "MissingMedia",
    "NO_SOURCE",
    "ZipEntry",
    "ZipIndex",
    "bind_environment",
    "check_zip_entry",
    "fetch_batch",
    "iter_tar",
    "normalize_member",
    "outcome_columns",
    "plan_ranges",
    "read_outcome",
    "recipe_variables",
    "read_zip_group",
    "read_zip_index",
    "variable_problems",
]
