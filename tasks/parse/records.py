"""Parse stage: JSONL lines to normalised Records, or to Rejects that say which line and why.

Accepted forms, all normalised to the same :class:`~vlmforge.schemas.records.Record`:

* Nemotron Image Training v3 / VLM Dataset v2: ``{"id", "messages": [{"role", "content"}]}`` where content
  is a string, or a list of bare strings and typed parts (``text``, ``image``, ``video``; parts may carry
  ``metadata``; untyped ``{"image": ...}`` parts are read by their key). ``system`` turns and ``<think>``
  blocks are kept as text.
* LLaVA / Llama-Nemotron-VLM-Dataset-v1 / Mantis: ``{"id", "image" | "images", "conversations" |
  "conversation": [{"from", "value"} | {"role", "content"}]}`` whose text holds one ``<image>`` placeholder
  per image (``<video>`` per video). The placeholders become media parts in place; a count that does not
  match the media list is a ``placeholder_mismatch`` reject, never a guess. ``messages`` with string
  content plus a top-level ``images`` list (LLaMA-Factory) is read the same way.

Nothing here raises on bad input: every line becomes exactly one Record or Reject. Reasons are a code, a
colon and a readable detail: ``empty_line``, ``invalid_utf8``, ``invalid_json: <msg> (col N)``,
``invalid_record: <detail>``, ``unsupported_part:<type>``, ``unsafe_ref: <ref> (<why>)``,
``placeholder_mismatch: <detail>``, ``duplicate_row: identical to line N``,
``line_too_long: <n> bytes > <cap>`` (a line over ``max_line_bytes`` is refused before it is decoded, so one
hostile line costs no more memory than its own bytes), and ``invalid_record: ... metadata nested deeper than N
levels`` (part metadata is kept verbatim; deeper values would break JSON encoders downstream).
"""

from __future__ import annotations

import gc
import json
import posixpath
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import fields
from typing import Any

import orjson

from ...schemas.records import MediaRef, Message, Part, Record, Reject

MEDIA_TYPES = ("image", "video")
_SCHEMES = ("http://", "https://", "file://", "s3://", "gs://", "hf://", "ftp://", "data:")
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# Schemes never followed even when a recipe lists them: they read this machine or inline bytes.
_NEVER_ALLOWED = frozenset({"file", "data", "local"})
# Roles of conversation forms (LLaVA "from" values) mapped to chat roles.
_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "system": "system",
}
_PLACEHOLDER = {"image": "<image>", "video": "<video>"}
_PLACEHOLDER_RE = re.compile(r"\n?(<image>|<video>)\n?")
_EMPTY: frozenset[str] = frozenset()
_MISSING = object()
#: Lines longer than this are rejected undecoded (``line_too_long``); 16 MiB is ~4M tokens of text.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: Deepest nesting accepted in a part's ``metadata`` (kept verbatim in the record).
MAX_METADATA_DEPTH = 64


def _too_deep(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/objects more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        obj, depth = stack.pop()
        if depth > limit:
            return True
        if type(obj) is dict:
            stack.extend((v, depth + 1) for v in obj.values() if type(v) is dict or type(v) is list)
        elif type(obj) is list:
            stack.extend((v, depth + 1) for v in obj if type(v) is dict or type(v) is list)
    return False


def _meta_reason(where: str) -> str:
    return f"invalid_record: {where}.metadata nested deeper than {MAX_METADATA_DEPTH} levels"


def _fast_constructors() -> tuple[Any, Any]:
    """Constructors of MediaRef and Record that skip the frozen dataclass ``__init__`` (3x cheaper).

    They set every slot through its descriptor, which is what the frozen ``__init__`` does one
    ``object.__setattr__`` at a time. Used only when the fields are the ones listed here, so a field
    added to either class falls back to the regular constructor instead of leaving a slot unset.
    """
    new = object.__new__
    if [f.name for f in fields(MediaRef)] != ["index", "kind", "ref"] or [f.name for f in fields(Record)] != [
        "sample_id",
        "line",
        "messages",
        "media",
        "id_conflict_of",
        "key",
        "form",
    ]:
        return MediaRef, lambda sid, line, messages, media: Record(sid, line, messages, media)

    def setter(cls: type, name: str) -> Any:
        return cls.__dict__[name].__set__  # the slot's member descriptor

    m_index, m_kind, m_ref = (setter(MediaRef, n) for n in ("index", "kind", "ref"))
    r_sid, r_line, r_msgs, r_media, r_conflict, r_key, r_form = (
        setter(Record, n) for n in ("sample_id", "line", "messages", "media", "id_conflict_of", "key", "form")
    )

    def media_ref(index: int, kind: str, ref: str) -> MediaRef:
        obj = new(MediaRef)
        m_index(obj, index)
        m_kind(obj, kind)
        m_ref(obj, ref)
        return obj

    def record(sid: str, line: int, messages: list[Message], media: tuple[MediaRef, ...]) -> Record:
        obj = new(Record)
        r_sid(obj, sid)
        r_line(obj, line)
        r_msgs(obj, messages)
        r_media(obj, media)
        r_conflict(obj, None)
        r_key(obj, None)
        r_form(obj, "messages")
        return obj

    return media_ref, record


_new_media_ref, _new_record = _fast_constructors()


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


def unsafe_ref_reason(ref: str, allowed_schemes: Collection[str] = _EMPTY) -> str | None:
    """Why a media reference may not be followed, or None when it is safe.

    Safe: a relative path that stays in its folder, or a URL whose scheme the subset's media recipe allows
    (``allowed_schemes``, e.g. ``{"https", "s3"}``; ``file`` and ``data`` are never allowed).
    """
    if not ref or not ref.strip():
        return "empty reference"
    if "\x00" in ref:
        return "NUL byte in reference"
    low = ref.lower()
    if low.startswith(_SCHEMES) or "://" in low:
        m = _SCHEME_RE.match(low)
        scheme = m.group(1) if m else ""
        if scheme and scheme in allowed_schemes and scheme not in _NEVER_ALLOWED:
            return None
        if allowed_schemes:
            return f"URL scheme {scheme or '?'!r} is not allowed by this subset's media recipe"
        return "URL references need a media recipe that allows them"
    if ref.startswith(("/", "\\")) or (len(ref) > 1 and ref[1] == ":"):
        return "absolute path"
    if ".." in ref.replace("\\", "/").split("/"):
        return "path escapes its folder ('..')"
    return None


def _check_ref(ref: str, allowed: Collection[str]) -> None:
    # Fast path for the common plain relative path; anything unusual gets the full check.
    if ref and ":" not in ref and ".." not in ref and "\x00" not in ref and ref[0] not in "/\\ \t":
        return
    bad = unsafe_ref_reason(ref, allowed)
    if bad:
        raise _Invalid(f"unsafe_ref: {printable(ref[:200])} ({bad})")


def printable(text: str) -> str:
    """``text`` with control and other non-printable characters escaped (``\\x00``), for reasons."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def normalize_ref(ref: str) -> str:
    """The path form used for matching against files and tar members (``./a//b`` -> ``a/b``)."""
    return posixpath.normpath(ref.replace("\\", "/")).lstrip("/")


def _media_ref(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(
        value, dict
    ):  # {"image": {"path": ...}} / {"video": {"url": ...}} / Mantis {"bytes", "path"}
        ref = value.get("path") or value.get("url")
        if isinstance(ref, str):
            return ref
        if value.get("bytes") is not None:
            raise _Invalid(
                f"invalid_record: {where} holds inline bytes; only path or URL references are read"
            )
    raise _Invalid(f"invalid_record: {where} must be a string path")


def _part(item: Any, where: str, allowed: Collection[str]) -> Part:
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
    if ptype == "image" or ptype == "video":
        ref = _media_ref(item.get(ptype), f"{where}.{ptype}")
        _check_ref(ref, allowed)
        meta = item.get("metadata")
        if isinstance(meta, dict):
            if meta and _too_deep(meta, MAX_METADATA_DEPTH):
                raise _Invalid(_meta_reason(where))
            return {"type": ptype, "ref": ref, "metadata": meta}
        return {"type": ptype, "ref": ref}
    if isinstance(ptype, str):
        raise _Invalid(f"unsupported_part:{ptype[:50]}")
    raise _Invalid(f"invalid_record: {where} has no usable type")


def _messages(raw: Any, allowed: Collection[str]) -> list[Message]:
    if not isinstance(raw, list):
        raise _Invalid(f"invalid_record: messages must be a list, got {type(raw).__name__}")
    if not raw:
        raise _Invalid("invalid_record: messages is empty")
    out: list[Message] = []
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise _Invalid(f"invalid_record: messages[{i}] must be an object")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise _Invalid(f"invalid_record: messages[{i}].role must be a non-empty string")
        if "content" not in msg:
            raise _Invalid(f"invalid_record: missing field messages[{i}].content")
        content = msg["content"]
        if isinstance(content, str):
            parts: list[Part] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = [_part(item, f"messages[{i}].content[{j}]", allowed) for j, item in enumerate(content)]
        elif content is None:
            parts = []
        else:
            raise _Invalid(f"invalid_record: messages[{i}].content must be a string or a list")
        out.append({"role": role, "content": parts})
    return out


def _turns(raw: Any, field: str) -> list[Message]:
    """LLaVA-style turns ({from, value} or {role, content: str}) as text-only messages."""
    if not isinstance(raw, list):
        raise _Invalid(f"invalid_record: {field} must be a list, got {type(raw).__name__}")
    if not raw:
        raise _Invalid(f"invalid_record: {field} is empty")
    out: list[Message] = []
    for i, turn in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(turn, dict):
            raise _Invalid(f"invalid_record: {where} must be an object")
        speaker = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if not isinstance(speaker, str) or not speaker:
            raise _Invalid(f"invalid_record: {where} needs a 'from' (or 'role') string")
        role = _ROLES.get(speaker.lower())
        if role is None:
            raise _Invalid(f"invalid_record: {where}.from {speaker[:40]!r} is not one of {', '.join(_ROLES)}")
        if not isinstance(text, str):
            raise _Invalid(
                f"invalid_record: {where} needs a 'value' (or 'content') string with <image> placeholders"
            )
        out.append({"role": role, "content": [{"type": "text", "text": text}]})
    return out


def _media_list(obj: dict[str, Any], one: str, many: str, allowed: Collection[str]) -> list[str]:
    if one in obj and many in obj:
        raise _Invalid(f"invalid_record: both {one!r} and {many!r} are set")
    value = obj.get(many, obj.get(one))
    field = many if many in obj else one
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    refs = [_media_ref(v, f"{field}[{i}]" if isinstance(value, list) else field) for i, v in enumerate(items)]
    for ref in refs:
        _check_ref(ref, allowed)
    return refs


def _expand_placeholders(messages: list[Message], images: list[str], videos: list[str]) -> None:
    """Replace each ``<image>`` / ``<video>`` in the text parts by the next media part, in place.

    A newline right before or after a placeholder belongs to it (LLaVA writes ``<image>\\n``); empty text
    left between placeholders is dropped.
    """
    counts = {"image": 0, "video": 0}
    for msg in messages:
        for part in msg["content"]:
            if part["type"] == "text":
                text = part["text"]
                counts["image"] += text.count("<image>")
                counts["video"] += text.count("<video>")
    for kind, refs in (("image", images), ("video", videos)):
        if counts[kind] != len(refs):
            n = counts[kind]
            raise _Invalid(
                f"placeholder_mismatch: {n} {_PLACEHOLDER[kind]} placeholder{'s' if n != 1 else ''} "
                f"for {len(refs)} {kind}{'s' if len(refs) != 1 else ''}"
            )
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


def _sample_id(obj: dict[str, Any]) -> str:
    if "id" not in obj:
        raise _Invalid("invalid_record: missing field id")
    sid = obj["id"]
    if isinstance(sid, int) and not isinstance(sid, bool):
        return str(sid)
    if not isinstance(sid, str) or not sid.strip():
        raise _Invalid("invalid_record: id must be a non-empty string")
    return sid


def _fast_record(obj: Any, line: int) -> Record | None:
    """The common well-formed Nemotron record, normalised with as little work as possible.

    Returns None whenever anything is unusual (another form, a wrong type, an unknown part, a reference
    that needs the full check): :func:`parse_record` then decides, with the precise reason.
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
                media.append(_new_media_ref(len(media), ptype, ref))
                meta = part.get("metadata")
                if type(meta) is dict:
                    if meta and _too_deep(meta, MAX_METADATA_DEPTH):
                        return None  # the full path names the part
                    parts.append({"type": ptype, "ref": ref, "metadata": meta})
                else:
                    parts.append({"type": ptype, "ref": ref})
            else:
                return None
        out.append({"role": role, "content": parts})
    return _new_record(sid, line, out, tuple(media))


def parse_record(obj: Any, line: int, allowed_schemes: Collection[str] = _EMPTY) -> Record:
    """Normalise one decoded JSON value; raises _Invalid with a reason."""
    fast = _fast_record(obj, line)
    if fast is not None:
        return fast
    if not isinstance(obj, dict):
        raise _Invalid(f"invalid_record: expected a JSON object, got {type(obj).__name__}")
    sid = _sample_id(obj)
    if "messages" in obj:
        form = "messages"
        messages = _messages(obj["messages"], allowed_schemes)
        images = _media_list(obj, "image", "images", allowed_schemes)
        videos = _media_list(obj, "video", "videos", allowed_schemes)
        if images or videos:  # LLaMA-Factory: string contents with placeholders + a media list
            if any(p["type"] in MEDIA_TYPES for m in messages for p in m["content"]):
                raise _Invalid("invalid_record: media given both as parts and as a top-level list")
            _expand_placeholders(messages, images, videos)
    elif "conversations" in obj or "conversation" in obj:
        form = "conversations"
        field = "conversations" if "conversations" in obj else "conversation"
        messages = _turns(obj[field], field)
        _expand_placeholders(
            messages,
            _media_list(obj, "image", "images", allowed_schemes),
            _media_list(obj, "video", "videos", allowed_schemes),
        )
    else:
        raise _Invalid("invalid_record: missing field messages (or conversations)")
    media: list[MediaRef] = []
    for msg in messages:
        for part in msg["content"]:
            ptype = part["type"]
            if ptype == "image" or ptype == "video":
                media.append(MediaRef(len(media), ptype, part["ref"]))
    return Record(sid, line, messages, tuple(media), form=form)


def _reject_nan(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def _decode_failure(raw: bytes, fast_error: orjson.JSONDecodeError) -> str:
    """The reason for a line orjson refused, in the stdlib decoder's words (they name the column)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid_utf8: byte {exc.start}: {exc.reason}"
    try:
        json.loads(text, parse_constant=_reject_nan)
    except json.JSONDecodeError as exc:
        return f"invalid_json: {exc.msg} (col {exc.colno})"
    except RecursionError:
        return "invalid_json: nested too deeply for the decoder (over ~1000 levels)"
    except ValueError as exc:
        return f"invalid_json: {str(exc) or type(exc).__name__}"
    # Valid for the stdlib but not for orjson: lone surrogates, numbers beyond a double.
    return f"invalid_json: {fast_error.msg} (col {fast_error.colno})"


def _record_or_reject(
    obj: Any, line: int, allowed_schemes: Collection[str], subset: str | None
) -> Record | Reject:
    try:
        return parse_record(obj, line, allowed_schemes)
    except _Invalid as exc:
        sid = obj.get("id") if isinstance(obj, dict) else None
        if isinstance(sid, int) and not isinstance(sid, bool):
            sid = str(sid)
        return Reject(line, exc.reason, sid if isinstance(sid, str) and sid else None, subset)
    except RecursionError:
        return Reject(line, "invalid_record: nesting too deep", None, subset)


def _undecodable(raw: bytes, line: int, exc: orjson.JSONDecodeError, subset: str | None) -> Reject:
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return Reject(line, "empty_line: the line is blank", None, subset)
    return Reject(line, _decode_failure(raw, exc), None, subset)


def _too_long(raw: bytes, line: int, cap: int, subset: str | None) -> Reject:
    return Reject(line, f"line_too_long: {len(raw)} bytes > {cap} (not decoded)", None, subset)


def parse_line(
    raw: bytes,
    line: int,
    *,
    allowed_schemes: Collection[str] = _EMPTY,
    subset: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Record | Reject:
    """One JSONL line to a Record or a Reject (never raises on bad input)."""
    if len(raw) > max_line_bytes:
        return _too_long(raw, line, max_line_bytes, subset)
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return _undecodable(raw, line, exc, subset)
    return _fast_record(obj, line) or _record_or_reject(obj, line, allowed_schemes, subset)


def _parse_lines(
    lines: list[bytes],
    first_line: int,
    allowed_schemes: Collection[str],
    duplicates: Mapping[int, int] | None,
    conflicts: Mapping[int, tuple[int, str]] | None,
    subset: str | None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[Record | Reject]:
    # The hot loop of the stage: kept flat (no generator, no per-line helper call on the common path).
    loads, fast, decode_error = orjson.loads, _fast_record, orjson.JSONDecodeError
    out: list[Record | Reject] = []
    append = out.append
    line = first_line
    for raw in lines:
        if len(raw) > max_line_bytes:
            append(_too_long(raw, line, max_line_bytes, subset))
            line += 1
            continue
        try:
            obj = loads(raw)
        except decode_error as exc:
            append(_undecodable(raw, line, exc, subset))
            line += 1
            continue
        append(fast(obj, line) or _record_or_reject(obj, line, allowed_schemes, subset))
        line += 1
    if duplicates or conflicts:
        dups, confl = duplicates or {}, conflicts or {}
        for i, item in enumerate(out):
            if type(item) is Record and (item.line in dups or item.line in confl):
                out[i] = _apply_dedup(item, dups, confl, subset)
    return out


def _apply_dedup(
    rec: Record, duplicates: Mapping[int, int], conflicts: Mapping[int, tuple[int, str]], subset: str | None
) -> Record | Reject:
    first = duplicates.get(rec.line)
    if first is not None:
        return Reject(rec.line, f"duplicate_row: identical to line {first}", rec.sample_id, subset)
    hit = conflicts.get(rec.line)
    if hit is not None:
        return Record(
            rec.sample_id, rec.line, rec.messages, rec.media, id_conflict_of=hit[0], key=hit[1], form=rec.form
        )
    return rec


def parse_batch(
    data: bytes,
    first_line: int,
    *,
    allowed_schemes: Collection[str] = _EMPTY,
    duplicates: Mapping[int, int] | None = None,
    conflicts: Mapping[int, tuple[int, str]] | None = None,
    subset: str | None = None,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> list[Record | Reject]:
    """Parse a chunk of whole JSONL lines whose first line has number ``first_line`` (1-based): every line
    becomes one Record or Reject, in order, in a list built with the cyclic GC paused (parsing creates no
    cycles).

    ``duplicates`` (line -> earlier identical line) and ``conflicts`` (line -> (earlier line with the same
    id, distinct key)) come from the catalog's scan (:meth:`SubsetEntry.duplicates_in` / ``conflicts_in``):
    a duplicate that parses becomes a ``duplicate_row`` reject (a duplicate of a bad row keeps its own
    reason); a conflicting record carries ``id_conflict_of`` and its distinct ``key``.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_lines(
            split_lines(data), first_line, allowed_schemes, duplicates, conflicts, subset, max_line_bytes
        )
    finally:
        if was_enabled:
            gc.enable()


def iter_line_chunks(f: Any, *, chunk_size: int = 8 * 1024 * 1024, end: int | None = None) -> Iterator[bytes]:
    """Whole-line chunks of an open binary file (from its current position to ``end`` or EOF).

    Memory stays bounded by ``chunk_size`` plus the longest line, whatever the file size.
    """
    pos = f.tell() if end is not None else 0
    tail = b""
    while True:
        want = chunk_size if end is None else min(chunk_size, end - pos)
        if want <= 0:
            break
        block = f.read(want)
        if not block:
            break
        pos += len(block)
        cut = block.rfind(b"\n")
        if cut < 0:
            tail += block
            continue
        yield tail + block[: cut + 1]
        tail = block[cut + 1 :]
    if tail:
        yield tail


def iter_records(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    allowed_schemes: Collection[str] = _EMPTY,
    subset: str | None = None,
    chunk_size: int = 8 * 1024 * 1024,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Record | Reject]:
    """Stream every line of a JSONL (local path or fsspec URL) as Records and Rejects, in bounded memory."""
    from ..storage import url_to_fs

    fs, path = url_to_fs(url, **dict(storage_options or {}))
    line = 1
    with fs.open(path, "rb", block_size=chunk_size) as f:
        for chunk in iter_line_chunks(f, chunk_size=chunk_size):
            items = parse_batch(
                chunk, line, allowed_schemes=allowed_schemes, subset=subset, max_line_bytes=max_line_bytes
            )
            line += len(items)
            yield from items
