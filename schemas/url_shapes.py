"""A shape of README URL that names a media location, declared by the recipe source model it drafts
(``url_shapes`` of a model in ``recipes.py``): ``vlmforge recipe init`` tries every model's shapes in
``rank`` order and drafts a source of the first one's kind."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UrlShape:
    """URLs ``pattern`` matches (from their start), drafted as the source fields ``fields`` makes of the match
    (the fields after ``kind``). ``rank``: shapes are tried lowest first, so a shape whose URLs another
    shape also matches (an archive in a Hugging Face repo, a repo) ranks below that other one."""

    rank: int
    pattern: re.Pattern[str]
    fields: Callable[[re.Match[str]], dict[str, Any]]

    def source_fields(self, url: str) -> dict[str, Any] | None:
        """The drafted fields of ``url``, or None when it does not have this shape."""
        m = self.pattern.match(url)
        return None if m is None else self.fields(m)
