from __future__ import annotations

from .acquire import FetchStream, fetch_batch, read_outcome
from .archive_members import normalize_member
from .client import HttpClient, HttpOptions
from .failures import (
    BAD_ARCHIVE,
    HTTP_404,
    MATCH_BUDGET,
    NO_SOURCE,
    NOT_FOUND,
    NOT_IN_ARCHIVE,
    SOURCE_ERROR,
    FetchError,
    classify_fs_error,
)
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome, FetchStats, Located, outcome_columns
from .ranges import FsRangeSource
from .recipe_env import bind_environment, recipe_variables, variable_problems
from .release_media import MediaResolver, MissingMedia, ReleaseMedia, file_in
from .retry import retry_call
from .sources.s3 import s3_filesystem
from .tar_format import iter_tar
from .zip_fetch import range_source
from .zip_format import ZipEntry, ZipIndex, check_zip_entry, plan_ranges, read_zip_group, read_zip_index

__all__ = [
    "BAD_ARCHIVE",
    "FetchContext",
    "FetchError",
    "FetchKnobs",
    "FetchOutcome",
    "FetchStats",
    "FetchStream",
    "FsRangeSource",
    "HTTP_404",
    "MATCH_BUDGET",
    "HttpClient",
    "HttpOptions",
    "Located",
    "MediaResolver",
    "MissingMedia",
    "NOT_FOUND",
    "NOT_IN_ARCHIVE",
    "NO_SOURCE",
    "ReleaseMedia",
    "SOURCE_ERROR",
    "ZipEntry",
    "ZipIndex",
    "bind_environment",
    "check_zip_entry",
    "classify_fs_error",
    "fetch_batch",
    "file_in",
    "iter_tar",
    "normalize_member",
    "outcome_columns",
    "plan_ranges",
    "range_source",
    "read_outcome",
    "recipe_variables",
    "read_zip_group",
    "read_zip_index",
    "retry_call",
    "s3_filesystem",
    "variable_problems",
]
