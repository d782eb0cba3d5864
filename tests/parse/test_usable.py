"""Conversations no trainer can use are rejects with their own codes, and a UTF-8 BOM costs no row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fsspec.implementations.local import LocalFileSystem

from vlmforge.schemas.reasons import REASONS, code_of
from vlmforge.schemas.records import Record, Reject
from vlmforge.tasks.catalog.scan import UTF8_BOM, scan_subset_jsonl
from vlmforge.tasks.parse.forms.conversations import _ROLES
from vlmforge.tasks.parse.jsonl_batch import iter_records, parse_batch, parse_line
from vlmforge.tasks.parse.usable import ROLES

USER = {"role": "user", "content": "What is shown?"}
ANSWER = {"role": "assistant", "content": "A cup."}


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        ([USER], "no_assistant_turn: 1 turn(s), none from the assistant"),
        (
            [{"role": "system", "content": "Be brief."}, USER],
            "no_assistant_turn: 2 turn(s), none from the assistant",
        ),
        (
            [USER, {"role": "assistant", "content": ""}],
            "empty_turn: messages[1] (assistant) has neither text nor media",
        ),
        ([USER, {"role": "assistant", "content": "  \n"}], "empty_turn: messages[1] (assistant)"),
        ([USER, {"role": "assistant", "content": None}], "empty_turn: messages[1] (assistant)"),
        ([USER, {"role": "assistant", "content": []}], "empty_turn: messages[1] (assistant)"),
        (
            [{"role": "user", "content": [{"type": "text", "text": ""}]}, ANSWER],
            "empty_turn: messages[0] (user)",
        ),
        (
            [USER, {"role": "robot", "content": "beep"}, ANSWER],
            "unknown_role: messages[1].role 'robot' is not one of",
        ),
        ([{"role": "User", "content": "hi"}, ANSWER], "unknown_role: messages[0].role 'User'"),
    ],
)
def test_a_conversation_no_trainer_can_use_is_a_reject_with_its_own_code(
    messages: list[dict[str, Any]], expected: str
) -> None:
    item = parse_line(_line({"id": "s", "messages": messages}), 3)
    assert isinstance(item, Reject) and item.sample_id == "s", item
    assert item.reason.startswith(expected), item.reason
    code = REASONS[code_of(item.reason)]
    assert (code.stage, code.status, code.level) == ("parse", "rejected", "sample")


def test_usable_conversations_still_parse_on_both_paths() -> None:
    image_only = {"role": "user", "content": [{"type": "image", "image": "a.jpg"}]}
    for sid in ("fast", 5):  # a string id takes the fast path, an integer id the full one
        rec = parse_line(_line({"id": sid, "messages": [image_only, ANSWER]}), 1)
        assert isinstance(rec, Record) and len(rec.media) == 1, rec
    llava = {"id": "l", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    assert isinstance(parse_line(_line(llava), 1), Record)
    no_answer = {"id": "l", "conversations": [{"from": "human", "value": "hi"}]}
    item = parse_line(_line(no_answer), 1)
    assert isinstance(item, Reject) and item.reason.startswith("no_assistant_turn"), item
    alien = {"id": "l", "conversations": [{"from": "alien", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    item = parse_line(_line(alien), 1)
    assert isinstance(item, Reject) and item.reason.startswith("unknown_role: conversations[0].from 'alien'")


def test_every_form_maps_its_roles_onto_the_accepted_list() -> None:
    assert set(_ROLES.values()) <= set(ROLES)


def test_a_bom_costs_no_row_and_the_catalog_agrees(tmp_path: Path) -> None:
    first = _line({"id": "a", "messages": [USER, ANSWER]})
    other = _line({"id": "a", "messages": [USER, {"role": "assistant", "content": "A mug."}]})
    rows = [first, _line({"id": "b", "messages": [USER, ANSWER]}), first, other]
    data = UTF8_BOM + b"\n".join(rows) + b"\n"
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    scan = scan_subset_jsonl(LocalFileSystem(), str(path), 2, subset="s", batch_media=None)
    assert scan.rows == 4 and scan.size == len(data)
    assert scan.offsets == (0, len(UTF8_BOM) + len(rows[0]) + len(rows[1]) + 2, len(data))
    # line 1 (behind the BOM) is the same row as line 3 and the same id as line 4, as the parser sees them
    assert scan.duplicate_rows == ((3, 1),)
    assert scan.id_conflicts == ((4, 1, "s__a__line4"),)
    items = []
    for i in range(len(scan.offsets) - 1):
        chunk = data[scan.offsets[i] : scan.offsets[i + 1]]
        items += parse_batch(
            chunk,
            1 + 2 * i,
            duplicates=dict(scan.duplicate_rows),
            conflicts={4: (1, "s__a__line4")},
            subset="s",
        )
    assert [type(x).__name__ for x in items] == ["Record", "Record", "Reject", "Record"], items
    assert items[0].sample_id == "a" and items[2].reason == "duplicate_row: identical to line 1"  # type: ignore[union-attr]
    assert [x.line for x in iter_records(str(path))] == [1, 2, 3, 4]
    assert isinstance(parse_line(data.split(b"\n")[0], 1), Record)
    # a BOM anywhere but the start of the file is content, and not JSON
    item = parse_line(UTF8_BOM + first, 2)
    assert isinstance(item, Reject) and item.reason.startswith("invalid_json")
