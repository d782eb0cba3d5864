"""A ``.parquet`` file that is not Parquet in a ``--format`` source is that file's reject, not the run's end:
staging writes one line that stands for it, the parser rejects that line as ``unreadable_source`` naming the
file and Arrow's one-line reason, and the source's other files are staged as usual."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vlmforge.schemas.records import Record, Reject
from vlmforge.tasks.parse.jsonl_batch import parse_batch
from vlmforge.tasks.staging.stage import stage_source


def test_a_parquet_file_that_is_not_parquet_is_one_reject_with_a_one_line_reason(tmp_path: Path) -> None:
    data = tmp_path / "infovqa" / "data"
    data.mkdir(parents=True)
    rows = [{"questionId": 1, "question": "What?", "answer": "x", "image": None}]
    pq.write_table(pa.Table.from_pylist(rows), data / "train-00000-of-00002.parquet")
    (data / "train-00001-of-00002.parquet").write_bytes(b"<html>rate limited</html>\n" * 40)
    out = tmp_path / "out"
    staged = stage_source(str(tmp_path / "infovqa"), "infovqa", str(out), str(out / "store"))
    assert staged.subsets == ["infovqa_train"]
    lines = (out / "staging" / "infovqa" / "infovqa_train" / "infovqa_train.jsonl").read_bytes()
    parsed = parse_batch(lines, 1, subset="infovqa_train")
    assert len(parsed) == 2 and isinstance(parsed[0], Reject | Record)
    bad = parsed[1]
    assert isinstance(bad, Reject) and bad.sample_id == "unreadable:train-00001-of-00002.parquet", bad
    assert bad.reason.startswith(
        "unreadable_source: train-00001-of-00002.parquet: not a readable Parquet file ("
    ), bad.reason
    assert "\n" not in bad.reason and len(bad.reason) < 600, bad.reason
    assert staged.stats[0].rows == 2 and staged.stats[0].problems == [bad.reason.split(": ", 1)[1]]
