"""Whether a normalised conversation is one a trainer can use: the checks every record form shares.

A record can be well formed and still teach nothing: no assistant turn (no supervised token), a turn with
neither text nor media (the chat template renders an empty turn), a role the chat template does not render.
Each becomes a reject with its own code (``no_assistant_turn``, ``empty_turn``, ``unknown_role``), checked
once on the normalised messages, whichever form (and the fast path) produced them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...schemas.reasons import reason
from ...schemas.records import Message
from .invalid import Invalid

#: The chat roles a sample may use (the one list; the forms map their own spellings onto these).
ROLES = ("system", "user", "assistant")
_ROLE_SET = frozenset(ROLES)


def unusable(messages: Sequence[Message]) -> str | None:
    """The reject reason of a conversation no trainer can use, or None when it is usable."""
    has_assistant = False
    for i, msg in enumerate(messages):
        role = msg["role"]
        if role not in _ROLE_SET:
            return reason(
                "unknown_role", f"messages[{i}].role {role[:40]!r} is not one of {', '.join(ROLES)}"
            )
        if not any(_carries(part) for part in msg["content"]):
            return reason("empty_turn", f"messages[{i}] ({role}) has neither text nor media")
        has_assistant = has_assistant or role == "assistant"
    if not has_assistant:
        return reason("no_assistant_turn", f"{len(messages)} turn(s), none from the assistant")
    return None


def check_usable(messages: Sequence[Message]) -> None:
    """Raise :class:`Invalid` with the reason when :func:`unusable` finds one."""
    problem = unusable(messages)
    if problem is not None:
        raise Invalid(problem)


def _carries(part: object) -> bool:
    """A part that renders something: media, or text that is not blank."""
    if not isinstance(part, dict):
        return False
    if part.get("type") != "text":
        return True
    text = part.get("text")
    return isinstance(text, str) and bool(text.strip())
