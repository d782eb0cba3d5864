"""The LLaVA form: ``{"id", "image" | "images", "conversations" | "conversation": [turns]}``.

Written by LLaVA, Llama-Nemotron-VLM-Dataset-v1 and Mantis (and by the staging of the public benchmark
sets, ``tasks/staging/``). Turns are ``{"from", "value"}`` or ``{"role", "content": str}``; the text
holds one ``<image>`` placeholder per image (``<video>`` per video), which becomes a media part in place.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ....schemas.reasons import reason
from ....schemas.records import Message
from ..invalid import Invalid, invalid_record
from ..parts import media_list
from ..placeholders import expand_placeholders

# Roles of conversation forms (LLaVA "from" values) mapped to chat roles (each one of ``usable.ROLES``).
_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "system": "system",
}


class ConversationsForm:
    name = "conversations"

    def claims(self, obj: dict[str, Any]) -> bool:
        return "conversations" in obj or "conversation" in obj

    def messages(self, obj: dict[str, Any], allowed: Collection[str]) -> list[Message]:
        field = "conversations" if "conversations" in obj else "conversation"
        messages = _turns(obj[field], field)
        expand_placeholders(
            messages,
            media_list(obj, "image", "images", allowed),
            media_list(obj, "video", "videos", allowed),
        )
        return messages


def _turns(raw: Any, field: str) -> list[Message]:
    """LLaVA-style turns ({from, value} or {role, content: str}) as text-only messages."""
    if not isinstance(raw, list):
        raise invalid_record(f"{field} must be a list, got {type(raw).__name__}")
    if not raw:
        raise invalid_record(f"{field} is empty")
    return [_turn(turn, f"{field}[{i}]") for i, turn in enumerate(raw)]


def _turn(turn: Any, where: str) -> Message:
    if not isinstance(turn, dict):
        raise invalid_record(f"{where} must be an object")
    speaker = turn.get("from", turn.get("role"))
    text = turn.get("value", turn.get("content"))
    if not isinstance(speaker, str) or not speaker:
        raise invalid_record(f"{where} needs a 'from' (or 'role') string")
    role = _ROLES.get(speaker.lower())
    if role is None:
        raise Invalid(
            reason("unknown_role", f"{where}.from {speaker[:40]!r} is not one of {', '.join(_ROLES)}")
        )
    if not isinstance(text, str):
        raise invalid_record(f"{where} needs a 'value' (or 'content') string with <image> placeholders")
    return {"role": role, "content": [{"type": "text", "text": text}]}
