"""The registries of a recipe source kind's parts (the fetch stage's fetcher, the estimate's sizer): each
built by :func:`by_source_kind`, so adding a kind to ``schemas/recipes.py``'s ``Source`` without one of its
parts fails at import, naming the kind and the part."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from .recipes import SOURCE_KINDS


class _OfKind(Protocol):
    @property
    def kind(self) -> str: ...


_Part = TypeVar("_Part", bound=_OfKind)


def by_source_kind(parts: Iterable[_Part], part: str) -> dict[str, _Part]:
    """A registry of one ``part`` per recipe source kind (a fetcher, a sizer, ...) keyed by its ``kind``, in
    :data:`SOURCE_KINDS` order: built where the parts are defined, so a kind without its part (or a part of no
    kind) fails at import, naming both."""
    found: dict[str, _Part] = {}
    for p in parts:
        if p.kind in found:
            raise ValueError(f"two {part}s of source kind {p.kind!r}")
        found[p.kind] = p
    missing, extra = set(SOURCE_KINDS) - set(found), set(found) - set(SOURCE_KINDS)
    if missing or extra:
        raise ValueError(
            f"every recipe source kind needs one {part}: none for {sorted(missing)}; "
            f"{sorted(extra)} are not kinds of schemas/recipes.py's Source"
        )
    return {kind: found[kind] for kind in SOURCE_KINDS}
