from __future__ import annotations

from .acquire import FetchStream, read_outcome
from .archive_members import normalize_member
from .client import HttpOptions
from .failures import FetchError
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome, FetchStats, outcome_columns
from .ranges import FsRangeSource
from .release_media import MediaResolver, MissingMedia
from .tar_format import iter_tar
from .zip_format import ZipEntry, ZipIndex, check_zip_entry, plan_ranges, read_zip_group, read_zip_index

__all__ = [
    "FetchContext",
    "FetchError",
    "FetchKnobs",
    "FetchOutcome",
    "FetchStats",
    "FetchStream",
    "FsRangeSource",
    "HttpOptions",
    "MediaResolver",
    "MissingMedia",
    "ZipEntry",
    "ZipIndex",
    "check_zip_entry",
    "iter_tar",
    "normalize_member",
    "outcome_columns",
    "plan_ranges",
    "read_outcome",
    "read_zip_group",
    "read_zip_index",
]
