"""Parse stage: JSONL lines to normalised Records, or to Rejects that say which line and why.

Accepted form (Nemotron Image Training v3 / VLM Dataset v2):
``{"id": str, "messages": [{"role", "content"}]}``
where content is a string, or a list of bare strings and typed parts (``text``, ``image``, ``video``; parts
may carry ``metadata``). Nothing here raises on bad input: every line becomes exactly one Record or Reject.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator
from typing import Any

from vlmforge.schemas.records import MediaRef, Message, Part, Record, Reject

MEDIA_TYPES = ("image", "video")
_SCHEMES = ("http://", "https://", "file://", "s3://", "gs://", "hf://", "ftp://", "data:")


class _Invalid(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def split_lines(data: bytes) -> list[bytes]:
    """Lines of a JSONL chunk; a trailing newline does not start another line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def unsafe_ref_reason(ref: str) -> str | None:
    """Why a media reference may not be followed, or None when it is a safe relative path."""
    if not ref or not ref.strip():
        return "empty reference"
    if "\x00" in ref:
        return "NUL byte in reference"
    low = ref.lower()
    if low.startswith(_SCHEMES) or "://" in low:
        return "URL references need a media recipe that allows them"
    if ref.startswith(("/", "\\")) or (len(ref) > 1 and ref[1] == ":"):
        return "absolute path"
    if ".." in ref.replace("\\", "/").split("/"):
        return "path escapes its folder ('..')"
    return None


def normalize_ref(ref: str) -> str:
    """The path form used for matching against files and tar members (``./a//b`` -> ``a/b``)."""
    return posixpath.normpath(ref.replace("\\", "/")).lstrip("/")


def _part(item: Any, where: str) -> Part:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if not isinstance(item, dict):
        raise _Invalid(f"invalid_record: {where} must be a string or an object, got {type(item).__name__}")
    ptype = item.get("type")
    if ptype is None:  # untyped parts seen in the wild: {"image": ...} / {"text": ...}
        ptype = next((t for t in ("image", "video", "text") if t in item), None)
    if ptype == "text":
        text = item.get("text")
        if not isinstance(text, str):
            raise _Invalid(f"invalid_record: {where}.text must be a string")
        return {"type": "text", "text": text}
    if ptype in MEDIA_TYPES:
        ref = item.get(ptype)
        if isinstance(ref, dict):  # {"image": {"path": ...}} / {"video": {"url": ...}}
            ref = ref.get("path") or ref.get("url")
        if not isinstance(ref, str):
            raise _Invalid(f"invalid_record: {where}.{ptype} must be a string path")
        bad = unsafe_ref_reason(ref)
        if bad:
            raise _Invalid(f"unsafe_ref: {ref[:200]} ({bad})")
        part: Part = {"type": ptype, "ref": ref}
        if isinstance(item.get("metadata"), dict):
            part["metadata"] = item["metadata"]
        return part
    if isinstance(ptype, str):
        raise _Invalid(f"unsupported_part:{ptype[:50]}")
    raise _Invalid(f"invalid_record: {where} has no usable type")


def _messages(raw: Any) -> list[Message]:
    if not isinstance(raw, list):
        raise _Invalid(f"invalid_record: messages must be a list, got {type(raw).__name__}")
    if not raw:
        raise _Invalid("invalid_record: messages is empty")
    out: list[Message] = []
    for i, msg in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _Invalid(f"invalid_record: {where} must be an object")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise _Invalid(f"invalid_record: {where}.role must be a non-empty string")
        if "content" not in msg:
            raise _Invalid(f"invalid_record: missing field {where}.content")
        content = msg["content"]
        if content is None:
            parts: list[Part] = []
        elif isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = [_part(item, f"{where}.content[{j}]") for j, item in enumerate(content)]
        else:
            raise _Invalid(f"invalid_record: {where}.content must be a string or a list")
        out.append({"role": role, "content": parts})
    return out


def parse_record(obj: Any, line: int) -> Record:
    """Normalise one decoded JSON value; raises _Invalid with a reason."""
    if not isinstance(obj, dict):
        raise _Invalid(f"invalid_record: expected a JSON object, got {type(obj).__name__}")
    sid = obj.get("id")
    if "id" not in obj:
        raise _Invalid("invalid_record: missing field id")
    if isinstance(sid, int) and not isinstance(sid, bool):
        sid = str(sid)
    if not isinstance(sid, str) or not sid.strip():
        raise _Invalid("invalid_record: id must be a non-empty string")
    if "messages" not in obj:
        raise _Invalid("invalid_record: missing field messages")
    messages = _messages(obj["messages"])
    media: list[MediaRef] = []
    for msg in messages:
        for part in msg["content"]:
            if part["type"] in MEDIA_TYPES:
                media.append(MediaRef(index=len(media), kind=part["type"], ref=part["ref"]))
    return Record(sample_id=sid, line=line, messages=messages, media=tuple(media))


def _reject_nan(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def parse_line(raw: bytes, line: int) -> Record | Reject:
    """One JSONL line to a Record or a Reject (never raises on bad input)."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return Reject(line=line, reason="empty_line: the line is blank")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(line=line, reason=f"invalid_utf8: byte {exc.start}: {exc.reason}")
    try:
        obj = json.loads(text, parse_constant=_reject_nan)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
        col = f" (col {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        return Reject(line=line, reason=f"invalid_json: {msg}{col}")
    sid = obj.get("id") if isinstance(obj, dict) else None
    try:
        return parse_record(obj, line)
    except _Invalid as exc:
        return Reject(line=line, reason=exc.reason, sample_id=sid if isinstance(sid, str) and sid else None)
    except RecursionError:
        return Reject(line=line, reason="invalid_record: nesting too deep")


def parse_chunk(data: bytes, first_line: int) -> Iterator[Record | Reject]:
    """Parse a chunk of whole JSONL lines whose first line has number ``first_line`` (1-based)."""
    for i, raw in enumerate(split_lines(data)):
        yield parse_line(raw, first_line + i)
