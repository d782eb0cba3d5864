"""One decoded JSON value to a normalised Record, or the Reject that names the field at fault.

The form is found through ``forms/registry.py``; what every form shares (the ``id``, the media list in
order of appearance, the reject's sample id) is done here once.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ...schemas.reasons import reason
from ...schemas.records import STAGED_ERROR, MediaRef, Record, Reject
from .forms.messages import fast_record
from .forms.record_forms import FORMS
from .invalid import Invalid, invalid_record
from .refs import NO_SCHEMES
from .usable import check_usable

_FIRST_FORM, *_OTHER_FORMS = FORMS
_NO_FORM = f"missing field {_FIRST_FORM} (or {', '.join(_OTHER_FORMS)})"


def parse_record(obj: Any, line: int, allowed_schemes: Collection[str] = NO_SCHEMES) -> Record:
    """Normalise one decoded JSON value; raises ``Invalid`` with a reason (also for a conversation no
    trainer can use, :mod:`.usable`)."""
    fast = fast_record(obj, line)
    if fast is not None:
        return fast
    if not isinstance(obj, dict):
        raise invalid_record(f"expected a JSON object, got {type(obj).__name__}")
    sid = _sample_id(obj)
    if STAGED_ERROR in obj:  # a source file staging could not read (tasks/staging/common.py)
        raise Invalid(reason("unreadable_source", str(obj[STAGED_ERROR])[:500]))
    form = next((f for f in FORMS.values() if f.claims(obj)), None)
    if form is None:
        raise invalid_record(_NO_FORM)
    messages = form.messages(obj, allowed_schemes)
    check_usable(messages)
    media: list[MediaRef] = []
    for msg in messages:
        for part in msg["content"]:
            ptype = part["type"]
            if ptype == "image" or ptype == "video":
                media.append(MediaRef(len(media), ptype, part["ref"]))
    return Record(sid, line, messages, tuple(media), form=form.name)


def _sample_id(obj: dict[str, Any]) -> str:
    if "id" not in obj:
        raise invalid_record("missing field id")
    sid = obj["id"]
    if isinstance(sid, int) and not isinstance(sid, bool):
        return str(sid)
    if not isinstance(sid, str) or not sid.strip():
        raise invalid_record("id must be a non-empty string")
    return sid


def record_or_reject(
    obj: Any, line: int, allowed_schemes: Collection[str], subset: str | None
) -> Record | Reject:
    """:func:`parse_record`, with a failure turned into the line's Reject (never raises on bad input)."""
    try:
        return parse_record(obj, line, allowed_schemes)
    except Invalid as exc:
        sid = obj.get("id") if isinstance(obj, dict) else None
        if isinstance(sid, int) and not isinstance(sid, bool):
            sid = str(sid)
        return Reject(line, exc.reason, sid if isinstance(sid, str) and sid else None, subset)
    except RecursionError:
        return Reject(line, reason("invalid_record", "nesting too deep"), None, subset)
