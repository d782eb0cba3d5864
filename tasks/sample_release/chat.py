"""Building the chat records of the release (content parts, turns) and serialising them as JSONL lines."""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["asst", "dump", "img", "txt", "user", "vid"]

_JSON_SEPARATORS: Final[tuple[str, str]] = (", ", ": ")


def dump(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=_JSON_SEPARATORS)


def img(ref: str) -> dict[str, str]:
    return {"type": "image", "image": ref}


def vid(ref: str) -> dict[str, str]:
    return {"type": "video", "video": ref}


def txt(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def asst(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}
