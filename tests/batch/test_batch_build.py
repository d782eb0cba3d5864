"""The batch hub on a tiny generated release: every line ends as one row, each knob drops with its own
reason, the parts and the stats agree, and a current batch is skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batch_release import DROPPED_BY, KNOBS, LINES, SUBSET, config, make_release

from vlmforge.schemas.reasons import REASONS, code_of
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.batch.knobs import RECORD_KNOBS, TOKEN_KNOBS
from vlmforge.tasks.batch.stats import BatchStats
from vlmforge.tasks.manifests import OutputLayout, read_records, read_table


def _built(
    root: Path, entry: SubsetEntry, **options: Any
) -> tuple[BatchStats, list[dict[str, Any]], OutputLayout]:
    cfg = config(root, **options)
    stats = build_batch(entry, 0, BatchWork.of(cfg))
    layout = OutputLayout(cfg.out)
    return stats, read_table(layout, "samples", SUBSET).to_pylist(), layout


@pytest.fixture
def release(tmp_path: Path) -> tuple[Path, SubsetEntry]:
    return tmp_path, make_release(tmp_path)


def test_every_line_ends_as_one_row(release: tuple[Path, SubsetEntry]) -> None:
    root, entry = release
    stats, rows, layout = _built(root, entry)
    assert [r["line"] for r in rows] == list(range(1, len(LINES) + 1))
    assert stats.lines == len(rows) == stats.ok + stats.rejected + stats.dropped
    for row, (_, status, code) in zip(rows, LINES, strict=True):
        assert row["status"] == status, row
        assert (code_of(row["reason"]) if row["reason"] else None) == code, row
    by_id = {r["sample_id"]: r for r in rows if r["status"] == "ok"}
    assert rows[7]["reason"] == f"duplicate_key: {by_id['ok-1']['key']} already used by line 1"
    assert rows[2]["reason"] == "missing_media: images/nope.png"
    assert rows[3]["reason"] == "media_error: images/html.png: not_an_image"
    # the ok rows carry their tokens, and the stats sum them
    ok = [r for r in rows if r["status"] == "ok"]
    assert stats.ok == len(ok) and stats.images == sum(r["n_images"] for r in ok)
    assert stats.text_tokens == sum(r["text_tokens"] for r in ok)
    assert stats.visual_tokens == sum(r["visual_tokens"] for r in ok)
    assert all(r["total_tokens"] == r["text_tokens"] + r["visual_tokens"] for r in ok)
    # one shard record per ok sample; media rows for every reference of the samples that got to media
    assert sorted(line for line, _ in read_records(layout, SUBSET)) == [r["line"] for r in ok]
    media = read_table(layout, "media", SUBSET).to_pylist()
    assert {m["line"] for m in media} == {r["line"] for r in rows if r["n_images"]}
    assert stats.media_rejected == sum(1 for m in media if m["status"] == "rejected") == 2
    for r in ok:
        assert sum(m["visual_tokens"] for m in media if m["line"] == r["line"]) == r["visual_tokens"]


def test_each_knob_drops_with_its_reason(release: tuple[Path, SubsetEntry]) -> None:
    assert set(DROPPED_BY) == set(RECORD_KNOBS) | set(TOKEN_KNOBS), "a new knob needs a case in batch_release"
    root, entry = release
    stats, rows, layout = _built(root, entry, **KNOBS)
    dropped = {r["line"]: r["reason"] for r in rows if r["status"] == "dropped"}
    assert {code_of(why): line for line, why in dropped.items()} == DROPPED_BY
    assert dropped[DROPPED_BY["max_num_images"]] == "max_num_images: 3 images > 2"
    assert dropped[DROPPED_BY["max_media_per_sample"]] == "max_media_per_sample: 4 media > 3"
    assert dropped[DROPPED_BY["max_visual_tokens"]].startswith("max_visual_tokens: ")
    assert dropped[DROPPED_BY["seq_len"]].endswith(" tokens > 300")
    assert stats.dropped == len(DROPPED_BY) and stats.lines == stats.ok + stats.rejected + stats.dropped
    for code in DROPPED_BY:
        assert (REASONS[code].stage, REASONS[code].status) == ("knob", "dropped")
    # a record knob drops before any media work: no media rows for its line
    media_lines = {m["line"] for m in read_table(layout, "media", SUBSET).to_pylist()}
    assert DROPPED_BY["max_num_images"] not in media_lines
    assert DROPPED_BY["max_visual_tokens"] in media_lines


def test_truncate_keeps_the_sample_and_records_the_cut(release: tuple[Path, SubsetEntry]) -> None:
    root, entry = release
    stats, rows, _ = _built(root, entry, seq_len=300, seq_len_mode="truncate")
    long = rows[DROPPED_BY["seq_len"] - 1]
    assert long["status"] == "ok" and long["total_tokens"] == 300 and long["truncated_tokens"] > 0
    assert stats.truncated == 1


def test_a_current_batch_is_skipped_with_its_committed_counts(release: tuple[Path, SubsetEntry]) -> None:
    root, entry = release
    first, _, _ = _built(root, entry)
    again = build_batch(entry, 0, BatchWork.of(config(root)))
    assert again.skipped_batches == 1 and (again.ok, again.rejected, again.lines) == (
        first.ok,
        first.rejected,
        first.lines,
    )
    assert again.media_seconds == 0.0 and again.media_refs == 0  # work of an earlier run is not this run's
    forced = build_batch(entry, 0, BatchWork.of(config(root)), force=True)
    assert forced.skipped_batches == 0 and forced.ok == first.ok
