"""The record-form registry: forms are tried in order, a registered form is used, and every reject the
parser builds carries a registered reason code."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import pytest

from vlmforge.schemas.reasons import REASONS, code_of
from vlmforge.schemas.records import Message, Record, Reject
from vlmforge.tasks.parse.forms.record_forms import FORMS
from vlmforge.tasks.parse.invalid import invalid_record
from vlmforge.tasks.parse.jsonl_batch import parse_batch, parse_line


def test_forms_are_tried_in_registry_order() -> None:
    assert list(FORMS) == ["messages", "conversations"]
    assert all(form.name == key for key, form in FORMS.items())
    both = {
        "id": "b",
        "messages": [{"role": "user", "content": "from messages"}, {"role": "assistant", "content": "a"}],
        "conversations": [{"from": "human", "value": "from conversations"}, {"from": "gpt", "value": "b"}],
    }
    rec = parse_line(json.dumps(both).encode(), 1)
    assert isinstance(rec, Record) and rec.form == "messages"
    assert rec.messages[0]["content"][0]["text"] == "from messages"


class _TurnsForm:
    """A made-up form (``{"id", "turns": [[role, text]]}``): what adding a form takes."""

    name = "turns"

    def claims(self, obj: dict[str, Any]) -> bool:
        return "turns" in obj

    def messages(self, obj: dict[str, Any], allowed: Collection[str]) -> list[Message]:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns:
            raise invalid_record("turns must be a non-empty list")
        return [{"role": role, "content": [{"type": "text", "text": text}]} for role, text in turns]


def test_a_registered_form_is_read_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(FORMS, "turns", _TurnsForm())
    ok = parse_line(json.dumps({"id": "t", "turns": [["user", "hi"], ["assistant", "yo"]]}).encode(), 3)
    assert isinstance(ok, Record) and ok.form == "turns" and ok.messages[1]["role"] == "assistant"
    bad = parse_line(json.dumps({"id": "t", "turns": []}).encode(), 4)
    assert isinstance(bad, Reject) and bad.reason == "invalid_record: turns must be a non-empty list"


ANSWER = b'{"role": "assistant", "content": "ok"}]}'


def test_every_parse_reject_has_a_registered_parse_code() -> None:
    lines = [
        b"",
        b"\xff\xfe",
        b'{"id": "x",',
        b"x" * 300,
        b'{"id": "a", "messages": [{"role": "user", "content": [{"type": "audio"}]}]}',
        b'{"id": "a", "messages": [{"role": "user", "content": [{"type": "image", "image": "/etc/x"}]}]}',
        b'{"id": "a", "images": ["a.jpg"], "conversations": [{"from": "human", "value": "no placeholder"}]}',
        b'{"id": "a"}',
        b'{"id": "a", "messages": [{"role": "user", "content": "ok"}]}',
        b'{"id": "a", "messages": [{"role": "user", "content": null}, ' + ANSWER,
        b'{"id": "a", "messages": [{"role": "robot", "content": "ok"}, ' + ANSWER,
        b'{"id": "a", "messages": [{"role": "user", "content": "ok"}, ' + ANSWER,
    ]
    items = parse_batch(b"\n".join(lines) + b"\n", 1, duplicates={12: 1}, max_line_bytes=200)
    rejects = [i for i in items if isinstance(i, Reject)]
    codes = [code_of(r.reason) for r in rejects]
    assert codes == [
        "empty_line",
        "invalid_utf8",
        "invalid_json",
        "line_too_long",
        "unsupported_part",
        "unsafe_ref",
        "placeholder_mismatch",
        "invalid_record",
        "no_assistant_turn",
        "empty_turn",
        "unknown_role",
        "duplicate_row",
    ]
    assert all(REASONS[c].stage == "parse" and REASONS[c].level == "sample" for c in codes)
