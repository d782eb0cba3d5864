"""Duplicates found by the catalog's whole-subset scan, applied to the records of one batch.

No batch can see the whole subset, so the catalog finds repeats (``SubsetEntry.duplicates_in`` /
``conflicts_in``) and the batch applies them here: a row identical to an earlier one becomes a
``duplicate_row`` reject (a duplicate of a bad row keeps its own reason); a row whose id repeats an earlier
row's with other content is kept under its distinct key and flagged with ``id_conflict_of``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...schemas.reasons import reason
from ...schemas.records import Record, Reject


def apply_dedup(
    items: list[Record | Reject],
    duplicates: Mapping[int, int] | None,
    conflicts: Mapping[int, tuple[int, str]] | None,
    subset: str | None,
) -> None:
    """Mark the duplicates and id conflicts among ``items``, in place."""
    if not duplicates and not conflicts:
        return
    dups, confl = duplicates or {}, conflicts or {}
    for i, item in enumerate(items):
        if type(item) is Record and (item.line in dups or item.line in confl):
            items[i] = _dedup_one(item, dups, confl, subset)


def _dedup_one(
    rec: Record, duplicates: Mapping[int, int], conflicts: Mapping[int, tuple[int, str]], subset: str | None
) -> Record | Reject:
    first = duplicates.get(rec.line)
    if first is not None:
        return Reject(rec.line, reason("duplicate_row", f"identical to line {first}"), rec.sample_id, subset)
    hit = conflicts.get(rec.line)
    if hit is not None:
        return Record(
            rec.sample_id, rec.line, rec.messages, rec.media, id_conflict_of=hit[0], key=hit[1], form=rec.form
        )
    return rec
