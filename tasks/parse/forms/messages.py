"""The Nemotron form: ``{"id", "messages": [{"role", "content"}]}`` (Image Training v3, VLM Dataset v2).

``content`` is a string, or a list of bare strings and typed parts (``text``, ``image``, ``video``; parts
may carry ``metadata``; untyped ``{"image": ...}`` parts are read by their key). ``system`` turns and
``<think>`` blocks are kept as text. String contents with ``<image>`` placeholders plus a top-level
``images`` list (LLaMA-Factory) are read the same way, the placeholders becoming media parts.

Almost every row of a Nemotron release is the plain, well-formed case; :func:`fast_record` normalises it
with as little work as possible and hands anything unusual to :class:`MessagesForm`, which names the reason.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ....schemas.records import MEDIA_TYPES, MediaRef, Message, Part, Record
from ..constructors import new_media_ref, new_record
from ..invalid import invalid_record
from ..parts import MAX_METADATA_DEPTH, content_part, media_list, too_deep
from ..placeholders import expand_placeholders
from ..usable import unusable

_MISSING = object()


class MessagesForm:
    name = "messages"

    def claims(self, obj: dict[str, Any]) -> bool:
        return "messages" in obj

    def messages(self, obj: dict[str, Any], allowed: Collection[str]) -> list[Message]:
        messages = _messages(obj["messages"], allowed)
        images = media_list(obj, "image", "images", allowed)
        videos = media_list(obj, "video", "videos", allowed)
        if images or videos:  # LLaMA-Factory: string contents with placeholders + a media list
            if any(p["type"] in MEDIA_TYPES for m in messages for p in m["content"]):
                raise invalid_record("media given both as parts and as a top-level list")
            expand_placeholders(messages, images, videos)
        return messages


def _messages(raw: Any, allowed: Collection[str]) -> list[Message]:
    if not isinstance(raw, list):
        raise invalid_record(f"messages must be a list, got {type(raw).__name__}")
    if not raw:
        raise invalid_record("messages is empty")
    return [_message(msg, i, allowed) for i, msg in enumerate(raw)]


def _message(msg: Any, i: int, allowed: Collection[str]) -> Message:
    if not isinstance(msg, dict):
        raise invalid_record(f"messages[{i}] must be an object")
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise invalid_record(f"messages[{i}].role must be a non-empty string")
    if "content" not in msg:
        raise invalid_record(f"missing field messages[{i}].content")
    content = msg["content"]
    if isinstance(content, str):
        parts: list[Part] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = [content_part(item, f"messages[{i}].content[{j}]", allowed) for j, item in enumerate(content)]
    elif content is None:
        parts = []
    else:
        raise invalid_record(f"messages[{i}].content must be a string or a list")
    return {"role": role, "content": parts}


def fast_record(obj: Any, line: int) -> Record | None:
    """The common well-formed Nemotron record, normalised with as little work as possible.

    Returns None whenever anything is unusual (another form, a wrong type, an unknown part, a reference
    that needs the full check, a conversation no trainer can use): the registered forms then decide, with
    the precise reason.
    """
    if type(obj) is not dict:
        return None
    sid = obj.get("id")
    messages = obj.get("messages")
    if type(sid) is not str or not sid or type(messages) is not list or not messages:
        return None
    if "images" in obj or "image" in obj or "videos" in obj or "video" in obj or sid.isspace():
        return None
    out: list[Message] = []
    media: list[MediaRef] = []
    for msg in messages:
        if type(msg) is not dict:
            return None
        role = msg.get("role")
        content = msg.get("content", _MISSING)
        if type(role) is not str or not role:
            return None
        if type(content) is str:
            out.append({"role": role, "content": [{"type": "text", "text": content}]})
            continue
        if type(content) is not list:
            return None
        parts = _fast_parts(content, media)
        if parts is None:
            return None
        out.append({"role": role, "content": parts})
    if unusable(out) is not None:
        return None  # the full path raises the reason
    return new_record(sid, line, out, tuple(media))


def _fast_parts(content: list[Any], media: list[MediaRef]) -> list[Part] | None:
    """The parts of one well-formed content list (media appended to ``media``), or None when unusual."""
    parts: list[Part] = []
    for part in content:
        if type(part) is not dict:
            if type(part) is str:
                parts.append({"type": "text", "text": part})
                continue
            return None
        ptype = part.get("type")
        if ptype == "text":
            text = part.get("text")
            if type(text) is not str:
                return None
            parts.append(part if len(part) == 2 else {"type": "text", "text": text})
        elif ptype == "image" or ptype == "video":
            ref = part.get(ptype)
            if (
                type(ref) is not str
                or not ref
                or ":" in ref
                or ".." in ref
                or "\x00" in ref
                or ref[0] in "/\\ \t"
            ):
                return None
            media.append(new_media_ref(len(media), ptype, ref))
            meta = part.get("metadata")
            if type(meta) is dict:
                if meta and too_deep(meta, MAX_METADATA_DEPTH):
                    return None  # the full path names the part
                parts.append({"type": ptype, "ref": ref, "metadata": meta})
            else:
                parts.append({"type": ptype, "ref": ref})
        else:
            return None
    return parts
