"""The sample key and split rules: a contract shared by the catalog (duplicate keys), the batch (which
assigns them) and the shard writer.

Both follow Megatron-Bridge's converters, so a key and its split are the same whichever tool wrote them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Literal

__all__ = ["KEY_RE", "SPLITS", "Split", "sanitize_key", "split_for_key"]

Split = Literal["train", "val"]
SPLITS: tuple[Split, ...] = ("train", "val")

#: A run of characters that may not appear in a key (or a subset name).
KEY_RE = re.compile(r"[^A-Za-z0-9_-]+")


def sanitize_key(subset: str, sample_id: str) -> str:
    """Megatron-Bridge's key rule: ``<subset>__<id>`` with every run of other characters replaced by ``_``."""
    return KEY_RE.sub("_", f"{subset}__{sample_id}")


def split_for_key(key: str, val_fraction: float) -> Split:
    """Deterministic split: ``val`` when the first 64 bits of sha256(key) / 2**64 fall below the fraction."""
    value = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], 16) / 2**64
    return "val" if value < val_fraction else "train"
