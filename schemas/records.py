"""The internal record every input format is normalised to, and the catalog entry of a subset.

Every JSON form the parser accepts (Nemotron v2/v3 ``messages``, LLaVA / Llama-Nemotron-VLM v1 / Mantis
``conversations`` with ``<image>`` placeholders; one module each in ``tasks/parse/forms/``) becomes the same
:class:`Record`.

Parts are plain dicts (``{"type": "text", "text": ...}``, ``{"type": "image", "ref": ...}``,
``{"type": "video", "ref": ...}``) rather than models: parsing 6.9M rows must stay cheap, and the parse
package (``tasks/parse/``) is the one place that builds them, so their shape is checked there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Part = dict[str, Any]
Message = dict[str, Any]  # {"role": str, "content": list[Part]}

#: Content part types that carry media (the rest is text).
MEDIA_TYPES = ("image", "video")
#: The key of a staged line that stands for a source file staging could not read (``tasks/staging``): the
#: parser rejects it as ``unreadable_source`` with the text it holds.
STAGED_ERROR = "vlmforge_unreadable"


@dataclass(frozen=True, slots=True)
class MediaRef:
    index: int  # position among the sample's media parts (0-based, order of appearance)
    kind: Literal["image", "video"]
    ref: str


@dataclass(frozen=True, slots=True)
class Record:
    """A parsed sample: normalised messages plus its media references in order of appearance."""

    sample_id: str
    line: int
    messages: list[Message]
    media: tuple[MediaRef, ...]
    # Set when an earlier line of the subset has the same id (or an id that sanitises to the same Energon
    # key) with different content: the line of that earlier row, and the distinct key this one gets.
    id_conflict_of: int | None = None
    key: str | None = None
    # Input form the record was normalised from: messages (Nemotron v2/v3) | conversations (LLaVA,
    # Llama-Nemotron-VLM v1, Mantis).
    form: str = "messages"


@dataclass(frozen=True, slots=True)
class Reject:
    """A line that could not become a Record; ``reason`` is a code, a colon, then a readable detail."""

    line: int
    reason: str
    sample_id: str | None = None
    subset: str | None = None


@dataclass(frozen=True, slots=True)
class SubsetEntry:
    """What the catalog knows of one subset before any media work."""

    subset: str
    path: str  # subset folder, as an fsspec path
    jsonl: str
    readme_sha256: str | None
    jsonl_sha256: str
    jsonl_bytes: int
    rows: int
    license: str
    license_text: str | None
    media_tars: tuple[str, ...] = ()
    # Byte offsets where each batch starts, plus the file size at the end: batch i covers
    # [offsets[i], offsets[i+1]) and starts at line batch_first_lines[i] (when empty, at i * batch_lines + 1).
    batch_offsets: tuple[int, ...] = field(default_factory=tuple)
    batch_first_lines: tuple[int, ...] = ()
    # fsspec storage options the paths above need (s3 endpoint, profile...); never written to manifests.
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False)
    release: str = ""  # the release as given (folder or URL)
    revision: str | None = None  # hf://...@rev, a Hugging Face snapshot folder, or a git checkout's HEAD
    media_sources: tuple[str, ...] = ()  # upstream media sources named by the README (URLs, hf://, s3://)
    media_recipe_sha256: str | None = None  # fingerprint of the subset's media recipe, when it has one
    # Rows identical to an earlier row: (line, earlier line). Rejected as ``duplicate_row``.
    duplicate_rows: tuple[tuple[int, int], ...] = ()
    # Rows whose id (as an Energon key) repeats an earlier row's with different content:
    # (line, earlier line, distinct key). Kept under that key and flagged.
    id_conflicts: tuple[tuple[int, int, str], ...] = ()
    # Lines after the first ``rows`` that a trial run (``--limit``) leaves out: the JSONL has
    # ``rows + beyond_limit`` lines, and the batch plan covers the first ``rows``.
    beyond_limit: int = 0

    def duplicates_in(self, first_line: int, last_line: int) -> dict[int, int]:
        """``duplicate_rows`` of lines ``first_line..last_line`` (one batch) as line -> earlier line."""
        return {ln: first for ln, first in self.duplicate_rows if first_line <= ln <= last_line}

    def conflicts_in(self, first_line: int, last_line: int) -> dict[int, tuple[int, str]]:
        """``id_conflicts`` of lines ``first_line..last_line`` as line -> (earlier line, distinct key)."""
        return {ln: (first, key) for ln, first, key in self.id_conflicts if first_line <= ln <= last_line}
