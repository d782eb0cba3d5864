"""References to staged media: ``store/<sha256>/<name>``, written into the staged JSONL by a layout.

Staging puts every media object it reads into the run's content store and writes this reference in its
place; the batch reads it back (:func:`read_store_ref`, checked against its sha256) and sends the bytes
through the same verify / resize / token path as any other file.
"""

from __future__ import annotations

import posixpath
import re

from ..storage import ContentStore, sha256_bytes

_STORE_REF = re.compile(r"^store/([0-9a-f]{64})/([A-Za-z0-9._-]{1,120})$")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _safe_name(path: str, fallback: str = "media") -> str:
    name = posixpath.basename(path.replace("\\", "/")) or fallback
    name = _SAFE_NAME.sub("_", name).strip("._") or fallback
    if len(name) > 120:
        stem, dot, ext = name.rpartition(".")
        name = (stem[: 119 - len(ext)] + "." + ext) if dot and len(ext) <= 10 else name[:120]
    return name


def store_ref(sha256: str, path: str) -> str:
    """The reference of a staged object: ``store/<sha256>/<file name of its source path>``."""
    return f"store/{sha256}/{_safe_name(path)}"


def is_store_ref(ref: str) -> bool:
    return _STORE_REF.match(ref) is not None


def read_store_ref(store: ContentStore, ref: str) -> bytes | None:
    """The bytes of a ``store/<sha256>/<name>`` reference (checked against its sha256), or None when the
    reference is not one or its object is not in ``store``."""
    m = _STORE_REF.match(ref)
    if m is None:
        return None
    sha = m.group(1)
    try:
        data = store.get(sha)
    except (FileNotFoundError, OSError):
        return None
    return data if sha256_bytes(data) == sha else None
