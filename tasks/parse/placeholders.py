"""``<image>`` / ``<video>`` placeholders in text turned into media parts, in place and counted first.

Forms that keep their media in a list beside the text (LLaVA, Mantis, LLaMA-Factory) mark each medium's
place with a placeholder. A count that does not match the list is a ``placeholder_mismatch`` reject, never
a guess about which image was meant.
"""

from __future__ import annotations

import re

from ...schemas.reasons import reason
from ...schemas.records import Message, Part
from .invalid import Invalid

_PLACEHOLDER = {"image": "<image>", "video": "<video>"}
_PLACEHOLDER_RE = re.compile(r"\n?(<image>|<video>)\n?")


def expand_placeholders(messages: list[Message], images: list[str], videos: list[str]) -> None:
    """Replace each ``<image>`` / ``<video>`` in the text parts by the next media part, in place.

    A newline right before or after a placeholder belongs to it (LLaVA writes ``<image>\\n``); empty text
    left between placeholders is dropped.
    """
    _check_counts(messages, {"image": images, "video": videos})
    if not images and not videos:
        return
    queues = {"image": iter(images), "video": iter(videos)}
    for msg in messages:
        parts: list[Part] = []
        for part in msg["content"]:
            if part["type"] != "text" or ("<image>" not in part["text"] and "<video>" not in part["text"]):
                parts.append(part)
                continue
            pieces = _PLACEHOLDER_RE.split(part["text"])
            for k, piece in enumerate(pieces):
                if k % 2:  # a placeholder
                    kind = "image" if piece == "<image>" else "video"
                    parts.append({"type": kind, "ref": next(queues[kind])})
                elif piece:
                    parts.append({"type": "text", "text": piece})
        msg["content"] = parts


def _check_counts(messages: list[Message], media: dict[str, list[str]]) -> None:
    counts = {"image": 0, "video": 0}
    for msg in messages:
        for part in msg["content"]:
            if part["type"] == "text":
                text = part["text"]
                counts["image"] += text.count("<image>")
                counts["video"] += text.count("<video>")
    for kind, refs in media.items():
        if counts[kind] != len(refs):
            n = counts[kind]
            raise Invalid(
                reason(
                    "placeholder_mismatch",
                    f"{n} {_PLACEHOLDER[kind]} placeholder{'s' if n != 1 else ''} "
                    f"for {len(refs)} {kind}{'s' if len(refs) != 1 else ''}",
                )
            )
