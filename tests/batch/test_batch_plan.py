"""Batches sized by work: a small subset is cut into enough batches for every core, a batch of images stays
within the media budget, and the batches of a split plan still account for every line exactly once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from batch_release import config

from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.batch.batch_pipeline import batch_lines_of, build_batch
from vlmforge.tasks.catalog.batch_plan import media_count
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.manifests import OutputLayout, read_table


def _text(i: int) -> dict[str, Any]:
    return {
        "id": f"t{i}",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": f"Question {i}?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Answer {i}."}]},
        ],
    }


def _nemotron(i: int, images: int) -> dict[str, Any]:
    parts: list[Any] = [{"type": "image", "image": f"img/{i}-{k}.png"} for k in range(images)]
    parts.append({"type": "text", "text": 'an "image" and a "video", quoted in the text'})
    return {
        "id": f"n{i}",
        "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "x"}],
    }


def _llava(i: int, images: int) -> dict[str, Any]:
    refs = (
        {"image": f"img/{i}.png"} if images == 1 else {"images": [f"img/{i}-{k}.png" for k in range(images)]}
    )
    question = "<image>\n" * images + "What is it?"
    return {
        "id": f"l{i}",
        **refs,
        "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": "x"}],
    }


def _release(root: Path, records: list[dict[str, Any]]) -> Path:
    folder = root / "rel" / "s"
    folder.mkdir(parents=True)
    (folder / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root / "rel"


def _batches(entry: SubsetEntry) -> list[tuple[int, int]]:
    """(first line, last line) of every batch of the plan."""
    return [batch_lines_of(entry, i, 2000) for i in range(len(entry.batch_offsets) - 1)]


def test_media_count_reads_both_record_forms_and_ignores_quoted_text() -> None:
    for images in range(5):
        assert media_count(json.dumps(_nemotron(0, images)).encode()) == images
    for images in range(1, 5):
        assert media_count(json.dumps(_llava(0, images)).encode()) == images
    assert media_count(json.dumps(_text(0)).encode()) == 0


@pytest.mark.parametrize("cpus", [1, 2, 4])
def test_a_small_subset_is_split_into_at_least_twice_the_cpus(tmp_path: Path, cpus: int) -> None:
    release = _release(tmp_path, [_text(i) for i in range(11)])
    (entry,) = catalog_release(str(release), batch_lines=2000, min_batches=2 * cpus)
    batches = _batches(entry)
    assert len(batches) == 2 * cpus
    # contiguous, every line once, each batch's bytes are exactly its lines
    assert [first for first, _ in batches] == [1] + [last + 1 for _, last in batches[:-1]]
    assert batches[-1][1] == entry.rows == 11
    data = Path(entry.jsonl).read_bytes()
    for i, (first, last) in enumerate(batches):
        chunk = data[entry.batch_offsets[i] : entry.batch_offsets[i + 1]]
        assert chunk.count(b"\n") == last - first + 1
        assert json.loads(chunk.split(b"\n")[0])["id"] == f"t{first - 1}"


def test_a_large_subset_keeps_its_line_batches(tmp_path: Path) -> None:
    release = _release(tmp_path, [_text(i) for i in range(50)])
    (entry,) = catalog_release(str(release), batch_lines=10, min_batches=4)
    assert _batches(entry) == [(1, 10), (11, 20), (21, 30), (31, 40), (41, 50)]


def test_a_batch_never_exceeds_the_media_budget(tmp_path: Path) -> None:
    counts = [0, 3, 1, 7, 2, 2, 0, 5, 1, 1, 4, 0, 6, 2]  # 7 alone is over the budget: a batch of its own
    records = [(_nemotron if i % 2 else _llava)(i, n) if n else _text(i) for i, n in enumerate(counts)]
    release = _release(tmp_path, records)
    budget = 5
    (entry,) = catalog_release(str(release), batch_lines=2000, batch_media=budget, min_batches=2)
    batches = _batches(entry)
    assert len(batches) > 2  # the budget, not the line count, cut these
    for first, last in batches:
        media = sum(counts[first - 1 : last])
        assert media <= budget or first == last, (first, last, media)
    assert [first for first, _ in batches] == [1] + [last + 1 for _, last in batches[:-1]]
    assert batches[-1][1] == len(counts)


def test_every_line_of_a_split_plan_ends_as_one_row(tmp_path: Path) -> None:
    release = _release(tmp_path, [_text(i) for i in range(7)] + [_text(2)])  # line 8 repeats line 3
    (entry,) = catalog_release(str(release), batch_lines=2000, min_batches=3)
    cfg = config(release)
    stats = [build_batch(entry, i, BatchWork.of(cfg)) for i in range(len(entry.batch_offsets) - 1)]
    rows = read_table(OutputLayout(cfg.out), "samples", "s").to_pylist()
    assert len(stats) == 3
    assert [r["line"] for r in rows] == list(range(1, 9))
    assert sum(s.lines for s in stats) == 8 == sum(s.ok + s.rejected + s.dropped for s in stats)
    assert rows[7]["reason"].startswith("duplicate_row") and rows[7]["status"] == "rejected"
