"""The ``json`` part of an ok sample, as the shard writer packs it (the batch's ``records`` part).

It holds the normalised record with each media part linked to its tar part name(s), the token counts as
written and the provenance, so a training-side filter needs no second lookup.
"""

from __future__ import annotations

import json
from typing import Any

from ...schemas.records import Record
from ...schemas.rows import MediaRow, SampleRow
from ..media import frame_part_names


def shard_record(record: Record, row: SampleRow, media: list[MediaRow]) -> str:
    """The record of an ok sample (``row`` holds its key and its token counts after any truncation)."""
    # Media indices were assigned in this same traversal order by the parser.
    parts = iter(sorted(media, key=lambda m: m.index))
    messages = []
    for msg in record.messages:
        content = [
            _media_part(part, next(parts)) if part["type"] in ("image", "video") else part
            for part in msg["content"]
        ]
        messages.append({"role": msg["role"], "content": content})
    doc = {
        "id": record.sample_id,
        "messages": messages,
        "vlmforge": {
            "subset": row.subset,
            "line": record.line,
            "key": row.key,
            "text_tokens": row.text_tokens,
            "visual_tokens": row.visual_tokens,
            "total_tokens": row.total_tokens,
            "truncated_tokens": row.truncated_tokens or 0,
        },
    }
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _media_part(part: dict[str, Any], m: MediaRow) -> dict[str, Any]:
    names: dict[str, Any] = (
        {"frames": frame_part_names(m.index, len(m.frame_sha256), str(m.out_ext))}
        if m.frame_sha256
        else {"part": f"{m.index}.{m.out_ext}"}
    )
    return {
        "type": part["type"],
        "index": m.index,
        **names,
        "ref": part["ref"],
        "width": m.out_width,
        "height": m.out_height,
        "sha256": m.sha256,
        # The frames the token count assumed: the cooker decodes exactly these.
        **({"frame_indices": m.frame_indices} if m.frame_indices else {}),
        **({"metadata": part["metadata"]} if "metadata" in part else {}),
    }
