"""The one rule for a subset name, used by the catalog (before any fetch), by recipes and by publish.

A subset name becomes a folder, a recipe file name, the prefix of every Energon sample key (where a ``.``
would split the key from its extension) and a value people type on the command line (where a leading ``-``
reads as an option). So: ASCII letters, digits, ``_`` and ``-``, starting with a letter or digit, at most
:data:`MAX_LEN` characters. Names are compared in Unicode NFC, so two spellings of one name (``café`` typed
precomposed, or with a combining accent as macOS writes folder names) are recognised as the same name and
refused with one fix hint rather than becoming two subsets that display alike.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

MAX_LEN: Final = 128
SUBSET_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]+")
RULE: Final = "ASCII letters, digits, _ and -, starting with a letter or digit"


def normalise_subset_name(name: str) -> str:
    """``name`` in Unicode NFC: the form names are compared in."""
    return unicodedata.normalize("NFC", name)


def suggested_subset_name(name: str) -> str:
    """A valid name close to ``name``: accents dropped, other runs of disallowed characters as ``_``."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    out = _NOT_ALLOWED.sub("_", folded).strip("_-")[:MAX_LEN]
    return out or "subset"


def subset_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid subset name (with a fix hint), or None when it is one."""
    if SUBSET_NAME_RE.match(name) and len(name) <= MAX_LEN:
        return None
    shown = ascii(name[:80]) + ("..." if len(name) > 80 else "")
    if not name:
        why = "is empty"
    elif len(name) > MAX_LEN:
        why = f"is {len(name)} characters long (at most {MAX_LEN})"
    else:
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "_-"))})
        why = (
            f"holds {', '.join(ascii(c) for c in bad[:8])}"
            if bad
            else "starts with a character other than a letter or digit"
        )
    return f"subset name {shown} {why}: a subset name is {RULE}; rename it to {suggested_subset_name(name)!r}"
