"""Content parts and media references, checked and normalised the same way whatever the record form.

A part becomes ``{"type": "text", "text"}`` or ``{"type": "image" | "video", "ref"[, "metadata"]}``. A
media value may be a path string or an object with ``path`` / ``url`` (Mantis writes ``{bytes, path}``);
inline bytes are refused: only references are read. Part ``metadata`` is kept verbatim, so it is refused
when it nests deeper than :data:`MAX_METADATA_DEPTH` (deeper values break JSON encoders downstream).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ...schemas.reasons import reason
from ...schemas.records import Part
from .invalid import Invalid, invalid_record
from .refs import check_ref

#: Deepest nesting accepted in a part's ``metadata`` (kept verbatim in the record).
MAX_METADATA_DEPTH = 64


def too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/objects more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        obj, depth = stack.pop()
        if depth > limit:
            return True
        if type(obj) is dict:
            stack.extend((v, depth + 1) for v in obj.values() if type(v) is dict or type(v) is list)
        elif type(obj) is list:
            stack.extend((v, depth + 1) for v in obj if type(v) is dict or type(v) is list)
    return False


def media_ref(value: Any, where: str) -> str:
    """The reference a media value names: a string, or the ``path`` / ``url`` of an object."""
    if isinstance(value, str):
        return value
    if isinstance(
        value, dict
    ):  # {"image": {"path": ...}} / {"video": {"url": ...}} / Mantis {"bytes", "path"}
        ref = value.get("path") or value.get("url")
        if isinstance(ref, str):
            return ref
        if value.get("bytes") is not None:
            raise invalid_record(f"{where} holds inline bytes; only path or URL references are read")
    raise invalid_record(f"{where} must be a string path")


def content_part(item: Any, where: str, allowed: Collection[str]) -> Part:
    """One item of a message's content list as a normalised part."""
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if not isinstance(item, dict):
        raise invalid_record(f"{where} must be a string or an object, got {type(item).__name__}")
    ptype = item.get("type")
    if ptype is None:  # untyped parts seen in the wild: {"image": ...} / {"text": ...}
        ptype = next((t for t in ("image", "video", "text") if t in item), None)
    if ptype == "text":
        text = item.get("text")
        if not isinstance(text, str):
            raise invalid_record(f"{where}.text must be a string")
        return {"type": "text", "text": text}
    if ptype == "image" or ptype == "video":
        return _media_part(item, ptype, where, allowed)
    if isinstance(ptype, str):
        # No space after the colon: ``unsupported_part:<type>`` is the form manifests already carry.
        raise Invalid(f"{reason('unsupported_part')}:{ptype[:50]}")
    raise invalid_record(f"{where} has no usable type")


def _media_part(item: dict[str, Any], ptype: str, where: str, allowed: Collection[str]) -> Part:
    ref = media_ref(item.get(ptype), f"{where}.{ptype}")
    check_ref(ref, allowed)
    meta = item.get("metadata")
    if isinstance(meta, dict):
        if meta and too_deep(meta, MAX_METADATA_DEPTH):
            raise invalid_record(metadata_too_deep(where))
        return {"type": ptype, "ref": ref, "metadata": meta}
    return {"type": ptype, "ref": ref}


def metadata_too_deep(where: str) -> str:
    return f"{where}.metadata nested deeper than {MAX_METADATA_DEPTH} levels"


def media_list(obj: dict[str, Any], one: str, many: str, allowed: Collection[str]) -> list[str]:
    """The references of a record's top-level media field (``image`` / ``images``, ``video`` / ``videos``)."""
    if one in obj and many in obj:
        raise invalid_record(f"both {one!r} and {many!r} are set")
    value = obj.get(many, obj.get(one))
    field = many if many in obj else one
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    refs = [media_ref(v, f"{field}[{i}]" if isinstance(value, list) else field) for i, v in enumerate(items)]
    for ref in refs:
        check_ref(ref, allowed)
    return refs
