"""The registry of recipe source kinds: one implementation per kind of ``schemas/recipes.py``'s ``Source``,
built by :func:`by_source_kind`, so a kind without its implementation, or an implementation without one of
its parts (the fetch stage's fetch, the estimate's sizer), fails at import, naming the kind and the part."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from .recipes import SOURCE_KINDS


class _OfKind(Protocol):
    @property
    def kind(self) -> str: ...


_Impl = TypeVar("_Impl", bound=_OfKind)


def by_source_kind(
    implementations: Iterable[_Impl], what: str, parts: Mapping[str, str] | None = None
) -> dict[str, _Impl]:
    """A registry of one ``what`` per recipe source kind keyed by its ``kind``, in :data:`SOURCE_KINDS`
    order, each with every method of ``parts`` (method name -> what it does). Built where the kinds are
    registered, so a kind without its implementation, one of no kind, or one lacking a part fails at import,
    naming them."""
    found: dict[str, _Impl] = {}
    for impl in implementations:
        if impl.kind in found:
            raise ValueError(f"two {what}s of source kind {impl.kind!r}")
        found[impl.kind] = impl
    missing, extra = set(SOURCE_KINDS) - set(found), set(found) - set(SOURCE_KINDS)
    if missing or extra:
        raise ValueError(
            f"every recipe source kind needs one {what}: none for {sorted(missing)}; "
            f"{sorted(extra)} are not kinds of schemas/recipes.py's Source"
        )
    for kind, impl in found.items():
        for method, role in (parts or {}).items():
            if not callable(getattr(impl, method, None)):
                raise ValueError(
                    f"source kind {kind!r}: {type(impl).__name__} has no {method}() ({role}), "
                    f"which every {what} needs"
                )
    return {kind: found[kind] for kind in SOURCE_KINDS}
