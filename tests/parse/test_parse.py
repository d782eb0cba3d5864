"""The parse stage: every record form users feed it, every reject reason, duplicates, streaming."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from vlmforge.schemas.records import MediaRef, Record, Reject
from vlmforge.tasks.parse.jsonl_batch import iter_records, parse_batch, parse_line
from vlmforge.tasks.parse.lines import iter_line_chunks
from vlmforge.tasks.parse.refs import normalize_ref, unsafe_ref_reason

ANSWER = {"role": "assistant", "content": "ok"}  # a usable conversation needs an assistant turn


def _line(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _one(obj: Any, **kw: Any) -> Record | Reject:
    return parse_line(_line(obj) if not isinstance(obj, bytes) else obj, 7, **kw)


def _record(obj: Any, **kw: Any) -> Record:
    item = _one(obj, **kw)
    assert isinstance(item, Record), item
    return item


def _reason(obj: Any, **kw: Any) -> str:
    item = _one(obj, **kw)
    assert isinstance(item, Reject), item
    assert item.line == 7
    return item.reason


# ---------------------------------------------------------------------------------------------- forms


def test_nemotron_record_in_all_its_forms() -> None:
    rec = _record(
        {
            "id": "n-1",
            "messages": [
                {"role": "system", "content": "You are careful."},
                {
                    "role": "user",
                    "content": [
                        "Compare",
                        {"type": "image", "image": "a.jpg", "metadata": {"width": 640, "height": 480}},
                        {"type": "video", "video": "clips/c.mp4", "metadata": {"video_fps": 2.0}},
                        {"image": "b.png"},  # untyped part
                        {"type": "image", "image": {"path": "c.jpg"}},
                        {"type": "text", "text": "which is brighter?"},
                    ],
                },
                {"role": "assistant", "content": "<think>look at both</think>The first."},
            ],
        }
    )
    assert rec.sample_id == "n-1" and rec.line == 7 and rec.form == "messages"
    assert rec.messages[0] == {"role": "system", "content": [{"type": "text", "text": "You are careful."}]}
    assert rec.messages[1]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "ref": "a.jpg", "metadata": {"width": 640, "height": 480}},
        {"type": "video", "ref": "clips/c.mp4", "metadata": {"video_fps": 2.0}},
        {"type": "image", "ref": "b.png"},
        {"type": "image", "ref": "c.jpg"},
        {"type": "text", "text": "which is brighter?"},
    ]
    assert rec.messages[2]["content"] == [{"type": "text", "text": "<think>look at both</think>The first."}]
    assert rec.media == (
        MediaRef(0, "image", "a.jpg"),
        MediaRef(1, "video", "clips/c.mp4"),
        MediaRef(2, "image", "b.png"),
        MediaRef(3, "image", "c.jpg"),
    )


def test_fast_and_full_paths_build_equal_records() -> None:
    # The same record once in the common shape (fast path) and once with an integer id (full path).
    msgs = [
        {"role": "user", "content": [{"type": "image", "image": "x.jpg"}, {"type": "text", "text": "?"}]},
        ANSWER,
    ]
    fast = _record({"id": "5", "messages": msgs})
    full = _record({"id": 5, "messages": msgs})
    assert fast == full
    assert fast == Record("5", 7, fast.messages, (MediaRef(0, "image", "x.jpg"),))
    assert hash(fast.media[0]) == hash(MediaRef(0, "image", "x.jpg"))


def test_llava_record_places_each_image_at_its_placeholder() -> None:
    rec = _record(
        {
            "id": 12,
            "image": "coco/0001.jpg",
            "conversations": [
                {"from": "human", "value": "<image>\nWhat is on the table?"},
                {"from": "gpt", "value": "A cup."},
            ],
        }
    )
    assert rec.sample_id == "12" and rec.form == "conversations"
    assert rec.messages == [
        {
            "role": "user",
            "content": [
                {"type": "image", "ref": "coco/0001.jpg"},
                {"type": "text", "text": "What is on the table?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A cup."}]},
    ]
    assert rec.media == (MediaRef(0, "image", "coco/0001.jpg"),)


def test_llama_nemotron_vlm_v1_record() -> None:
    rec = _record(
        {
            "id": "ocr_4-000017",
            "image": "ocr_4/images/page_17.png",
            "conversations": [
                {"from": "system", "value": "Transcribe faithfully."},
                {"from": "human", "value": "Read the page.\n<image>"},
                {"from": "gpt", "value": "Chapter 1"},
            ],
            "metadata": {"pdf": "doc.pdf", "page_number": 17, "url": "https://example.org/doc.pdf"},
        }
    )
    assert [m["role"] for m in rec.messages] == ["system", "user", "assistant"]
    assert rec.messages[1]["content"] == [
        {"type": "text", "text": "Read the page."},
        {"type": "image", "ref": "ocr_4/images/page_17.png"},
    ]


def test_mantis_record_with_several_images_in_order() -> None:
    rec = _record(
        {
            "id": "mantis-3",
            "images": [{"bytes": None, "path": "m/1.jpg"}, {"bytes": None, "path": "m/2.jpg"}, "m/3.jpg"],
            "conversation": [
                {"role": "user", "content": "<image> <image> Which differs from <image>?"},
                {"role": "assistant", "content": "The last one."},
            ],
        }
    )
    assert [m.ref for m in rec.media] == ["m/1.jpg", "m/2.jpg", "m/3.jpg"]
    assert rec.messages[0]["content"] == [
        {"type": "image", "ref": "m/1.jpg"},
        {"type": "text", "text": " "},
        {"type": "image", "ref": "m/2.jpg"},
        {"type": "text", "text": " Which differs from "},
        {"type": "image", "ref": "m/3.jpg"},
        {"type": "text", "text": "?"},
    ]


def test_video_placeholders_and_messages_with_a_media_list() -> None:
    rec = _record(
        {
            "id": "v",
            "videos": ["clips/a.mp4"],
            "messages": [
                {"role": "user", "content": "<video>Describe it."},
                {"role": "assistant", "content": "Ok"},
            ],
        }
    )
    assert rec.media == (MediaRef(0, "video", "clips/a.mp4"),)
    assert rec.messages[0]["content"] == [
        {"type": "video", "ref": "clips/a.mp4"},
        {"type": "text", "text": "Describe it."},
    ]


def test_text_only_conversation_and_literal_placeholder_without_media_list() -> None:
    rec = _record(
        {"id": "t", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    )
    assert rec.media == ()
    # A Nemotron record whose text mentions <image> has no media list: the text is kept as written.
    rec = _record(
        {"id": "u", "messages": [{"role": "user", "content": "what does <image> mean in HTML?"}, ANSWER]}
    )
    assert rec.messages[0]["content"] == [{"type": "text", "text": "what does <image> mean in HTML?"}]


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        (
            {
                "id": "p",
                "images": ["a.jpg", "b.jpg"],
                "conversations": [{"from": "human", "value": "<image> what?"}],
            },
            "placeholder_mismatch: 1 <image> placeholder for 2 images",
        ),
        (
            {"id": "p", "image": "a.jpg", "conversations": [{"from": "human", "value": "no placeholder"}]},
            "placeholder_mismatch: 0 <image> placeholders for 1 image",
        ),
        (
            {"id": "p", "conversations": [{"from": "human", "value": "<image><image>"}]},
            "placeholder_mismatch: 2 <image> placeholders for 0 images",
        ),
        (
            {"id": "p", "video": "v.mp4", "conversations": [{"from": "human", "value": "<image>"}]},
            "placeholder_mismatch: 1 <image> placeholder for 0 images",
        ),
    ],
)
def test_placeholder_count_mismatch_is_a_reject(obj: Any, reason: str) -> None:
    item = _one(obj)
    assert isinstance(item, Reject) and item.reason == reason and item.sample_id == "p"


# -------------------------------------------------------------------------------------------- rejects


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "empty_line: the line is blank"),
        (b"   \r", "empty_line: the line is blank"),
        (b'{"id": "a", "messages": [1 2]}', "invalid_json: Expecting ',' delimiter (col 28)"),
        (b'{"id": "a", "messages": [{"role": "user", "content": "x"}], }', "invalid_json: "),
        (b'{"id": "a\xff"}', "invalid_utf8: byte 9: invalid start byte"),
        (b'{"id": "a", "x": NaN}', "invalid_json: NaN is not valid JSON"),
        (b'{"id": "a", "x": "\\ud800"}', "invalid_json: no low surrogate in string (col"),
        (b"[" * 5000 + b"]" * 5000, "invalid_json: "),
        (b"[1, 2]", "invalid_record: expected a JSON object, got list"),
    ],
)
def test_undecodable_lines_say_why(raw: bytes, reason: str) -> None:
    assert _reason(raw).startswith(reason)


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"messages": []}, "invalid_record: missing field id"),
        ({"id": "", "messages": []}, "invalid_record: id must be a non-empty string"),
        ({"id": "r"}, "invalid_record: missing field messages (or conversations)"),
        ({"id": "r", "messages": "hello"}, "invalid_record: messages must be a list, got str"),
        (
            {"id": "r", "messages": [{"content": "x"}]},
            "invalid_record: messages[0].role must be a non-empty string",
        ),
        ({"id": "r", "messages": [{"role": "user"}]}, "invalid_record: missing field messages[0].content"),
        (
            {"id": "r", "messages": [{"role": "user", "content": [{"type": "image", "image": 3}]}]},
            "invalid_record: messages[0].content[0].image must be a string path",
        ),
        (
            {"id": "r", "messages": [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}]}]},
            "unsupported_part:audio",
        ),
        (
            {"id": "r", "messages": [{"role": "user", "content": [{"type": "point_cloud", "x": 1}]}]},
            "unsupported_part:point_cloud",
        ),
        (
            {"id": "r", "conversations": [{"from": "alien", "value": "hi"}]},
            "unknown_role: conversations[0].from 'alien' is not one of",
        ),
        (
            {
                "id": "r",
                "images": [{"bytes": "AAAA"}],
                "conversations": [{"from": "human", "value": "<image>"}],
            },
            "invalid_record: images[0] holds inline bytes",
        ),
    ],
)
def test_bad_records_say_which_field(obj: Any, reason: str) -> None:
    item = _one(obj)
    assert isinstance(item, Reject) and item.reason.startswith(reason), item
    assert item.sample_id == (obj.get("id") or None)


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("../../etc/passwd", "unsafe_ref: ../../etc/passwd (path escapes its folder ('..'))"),
        ("/etc/passwd", "unsafe_ref: /etc/passwd (absolute path)"),
        ("C:\\Windows\\win.ini", "unsafe_ref: C:\\Windows\\win.ini (absolute path)"),
        (
            "https://example.org/a.jpg",
            "unsafe_ref: https://example.org/a.jpg (URL references need a media recipe",
        ),
        ("file:///etc/passwd", "unsafe_ref: file:///etc/passwd (URL references need a media recipe"),
        ("", "unsafe_ref:  (empty reference)"),
    ],
)
def test_unsafe_references_are_rejected(ref: str, why: str) -> None:
    obj = {"id": "u", "messages": [{"role": "user", "content": [{"type": "image", "image": ref}]}]}
    assert _reason(obj).startswith(why)


def test_a_recipe_allows_url_schemes_but_never_file() -> None:
    def obj(ref: str) -> dict[str, Any]:
        return {
            "id": "u",
            "messages": [{"role": "user", "content": [{"type": "image", "image": ref}]}, ANSWER],
        }

    allowed = {"https", "s3", "file"}
    rec = _record(obj("https://example.org/a.jpg"), allowed_schemes=allowed)
    assert rec.media[0].ref == "https://example.org/a.jpg"
    assert _reason(obj("http://example.org/a.jpg"), allowed_schemes=allowed) == (
        "unsafe_ref: http://example.org/a.jpg"
        " (URL scheme 'http' is not allowed by this subset's media recipe)"
    )
    assert "not allowed" in _reason(obj("file:///etc/passwd"), allowed_schemes=allowed)
    assert unsafe_ref_reason("a/../../b") == "path escapes its folder ('..')"
    assert unsafe_ref_reason("a/b..c.jpg") is None and unsafe_ref_reason("12:30.jpg") is None
    assert normalize_ref("./a//b/../c.jpg") == "a/c.jpg"


def test_rejects_carry_subset_line_and_id() -> None:
    data = (
        _line({"id": "ok", "messages": [{"role": "user", "content": "hi"}, ANSWER]})
        + b'\n{"id": "bad", "messages": 1}\n'
    )
    items = parse_batch(data, 41, subset="docvqa")
    assert isinstance(items[0], Record) and items[0].line == 41
    assert items[1] == Reject(42, "invalid_record: messages must be a list, got int", "bad", "docvqa")


# --------------------------------------------------------------------------------------------- dedup


def test_duplicates_and_id_conflicts_from_the_catalog() -> None:
    row = _line({"id": "a", "messages": [{"role": "user", "content": "hi"}, ANSWER]})
    other = _line({"id": "a", "messages": [{"role": "user", "content": "bye"}, ANSWER]})
    bad = b"{not json"
    data = b"\n".join([row, other, row, bad, bad]) + b"\n"
    items = parse_batch(
        data,
        1,
        duplicates={3: 1, 5: 4},
        conflicts={2: (1, "s__a__line2")},
        subset="s",
    )
    assert isinstance(items[0], Record) and items[0].key is None and items[0].id_conflict_of is None
    assert isinstance(items[1], Record) and items[1].key == "s__a__line2" and items[1].id_conflict_of == 1
    assert items[2] == Reject(3, "duplicate_row: identical to line 1", "a", "s")
    assert isinstance(items[4], Reject) and items[4].reason.startswith("invalid_json")  # keeps its own reason


# ----------------------------------------------------------------------------------------- streaming


def test_line_numbers_survive_crlf_and_a_missing_final_newline() -> None:
    row = _line({"id": "x", "messages": [{"role": "user", "content": "hi"}, ANSWER]})
    items = parse_batch(row + b"\r\n\r\n" + row, 1)
    assert [type(i).__name__ for i in items] == ["Record", "Reject", "Record"]
    assert [i.line for i in items] == [1, 2, 3]


def test_line_chunks_cut_only_between_lines() -> None:
    lines = [
        _line({"id": f"r{i}", "messages": [{"role": "user", "content": "x" * (i * 7)}]}) for i in range(50)
    ]
    data = b"\n".join(lines)  # no final newline
    chunks = list(iter_line_chunks(io.BytesIO(data), chunk_size=64))
    assert b"".join(chunks) == data
    assert all(c.endswith(b"\n") for c in chunks[:-1])
    f = io.BytesIO(data)
    f.seek(len(lines[0]) + 1)
    part = b"".join(iter_line_chunks(f, chunk_size=50, end=len(lines[0]) + len(lines[1]) + 2))
    assert part == lines[1] + b"\n"


def test_iter_records_streams_a_file(tmp_path: Any) -> None:
    p = tmp_path / "s.jsonl"
    rows = [
        _line({"id": f"r{i}", "messages": [{"role": "user", "content": "y" * 99}, ANSWER]})
        for i in range(300)
    ]
    p.write_bytes(b"\n".join(rows) + b"\n")
    items = list(iter_records(str(p), chunk_size=1000, subset="s"))
    assert [i.line for i in items] == list(range(1, 301))
    assert all(isinstance(i, Record) for i in items) and items[-1].sample_id == "r299"
    assert [i.line for i in iter_records(f"file://{p}")] == list(range(1, 301))
