"""The media references of one subset, exactly as a run sees them: the JSONL parsed by the parse stage's own
code (:func:`~vlmforge.tasks.parse.batch.parse_batch`, the catalog's duplicate rows and id conflicts
applied), so a line the run rejects contributes no reference here either.

Each distinct reference is kept once with its kind and how many samples use it: the store holds an object
once, a shard holds it once per sample that uses it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field

from ...schemas.records import Record, SubsetEntry
from ..catalog import strip_bom
from ..parse import iter_line_chunks, parse_batch, split_lines
from ..storage import url_to_fs

CHUNK = 8 * 1024 * 1024


@dataclass
class SubsetRefs:
    """What the parser keeps of one subset: its records and their media references."""

    subset: str
    rows: int = 0  # lines
    records: int = 0  # lines that became a Record (the rest are rejected at parse time)
    refs: int = 0  # media references of the records, with repeats
    record_bytes: int = 0  # JSONL bytes of the records (the text a shard carries)
    uses: Counter[str] = field(default_factory=Counter)  # distinct reference -> samples using it
    kinds: dict[str, str] = field(default_factory=dict)  # distinct reference -> image | video

    def add(self, record: Record, line_bytes: int) -> None:
        self.records += 1
        self.record_bytes += line_bytes
        for m in record.media:
            self.refs += 1
            self.uses[m.ref] += 1
            self.kinds.setdefault(m.ref, m.kind)

    @property
    def distinct(self) -> list[str]:
        """Distinct references in first-seen order."""
        return list(self.uses)


def subset_references(entry: SubsetEntry, allowed_schemes: Collection[str] = ()) -> SubsetRefs:
    """Parse ``entry``'s JSONL as the run does and collect its references (bounded memory per chunk)."""
    out = SubsetRefs(entry.subset)
    fs, path = url_to_fs(entry.jsonl, **entry.storage_options)
    line = 1
    with fs.open(path, "rb", block_size=CHUNK) as f:
        for chunk in iter_line_chunks(f, chunk_size=CHUNK):
            lines = split_lines(strip_bom(chunk, line))
            last = line + len(lines) - 1
            items = parse_batch(
                chunk,
                line,
                allowed_schemes=allowed_schemes,
                duplicates=entry.duplicates_in(line, last),  # duplicate rows: rejects, as in the run
                conflicts=entry.conflicts_in(line, last),
                subset=entry.subset,
            )
            for raw, item in zip(lines, items, strict=True):
                out.rows += 1
                if isinstance(item, Record):
                    out.add(item, len(raw) + 1)
            line = last + 1
    return out
