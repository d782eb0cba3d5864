"""The archives stage: zip and tar archives read by range requests (:func:`read_zip_index`,
:func:`read_zip_group` over a :class:`RangeSource`) or streamed once (:func:`iter_tar`), a release tar's
member table read by seeking (:func:`seek_members`), and which members may be served
(:func:`normalize_member`). The fetch stage serves media from them; staging reads public sets with them."""

from __future__ import annotations

from .archive_members import normalize_member, tar_member_problem
from .ranges import FsRangeSource, HttpRangeSource, RangeSource
from .tar_format import HashingReader, iter_tar
from .tar_index import IndexDeadline, claims_past_end, past_end_text, real_size, seek_members
from .zip_format import ZipEntry, ZipIndex, check_zip_entry, plan_ranges, read_zip_group, read_zip_index

__all__ = [
    "FsRangeSource",
    "HashingReader",
    "HttpRangeSource",
    "IndexDeadline",
    "RangeSource",
    "ZipEntry",
    "ZipIndex",
    "check_zip_entry",
    "claims_past_end",
    "iter_tar",
    "normalize_member",
    "past_end_text",
    "plan_ranges",
    "read_zip_group",
    "read_zip_index",
    "real_size",
    "seek_members",
    "tar_member_problem",
]
