"""Which archive members may ever be served, and the path form members are matched by.

One rule for every archive the pipeline reads (upstream zips and tars, the release's media tars, staged
source archives): a member that is a symlink, hardlink or device, has an absolute name, or contains ``..``
is never served and its bytes are never read; nothing from an archive is ever written under a path taken
from the archive (the store is content-addressed).
"""

from __future__ import annotations

import tarfile

from ..parse import normalize_ref

# A member name and a row's media reference take one path form, so that they match by string.
normalize_member = normalize_ref


def unsafe_member_reason(name: str, *, symlink: bool = False, hardlink: bool = False) -> str | None:
    """Why an archive member may never be served, or None."""
    if symlink:
        return "symlink member"
    if hardlink:
        return "hardlink member"
    raw = name.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        return "absolute member path"
    if ".." in raw.split("/"):
        return "member path escapes its folder ('..')"
    if "\x00" in raw:
        return "NUL byte in member name"
    return None


def tar_member_problem(member: tarfile.TarInfo) -> str | None:
    """Why a tar member may never be served (a link, device, absolute or escaping name), or None. Folders
    are not members anyone references: callers skip them first."""
    bad = unsafe_member_reason(member.name, symlink=member.issym(), hardlink=member.islnk())
    if bad is None and not member.isreg():
        bad = "not a regular file"
    return bad
