"""``--limit N`` (a trial run) at the catalog: each subset's entry covers the first N lines of its JSONL (the
batch plan ends where line N + 1 starts), the rest are counted as ``beyond_limit``, and a refresh completes a
partial subset."""

from __future__ import annotations

import json
from pathlib import Path

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.catalog import catalog_columns, catalog_release, plan_refresh, refresh_config


def _release(root: Path, lines: list[str]) -> Path:
    sub = root / "rel" / "s"
    sub.mkdir(parents=True)
    (sub / "README.md").write_text("License: CC-BY-4.0\n")
    (sub / "s.jsonl").write_text("".join(line + "\n" for line in lines))
    return root / "rel"


def _row(i: int, text: str | None = None) -> str:
    msgs = [{"role": "user", "content": text or f"q{i}"}, {"role": "assistant", "content": "a"}]
    return json.dumps({"id": f"r{i}", "messages": msgs})


def test_the_plan_covers_the_first_n_lines_and_counts_the_rest(tmp_path: Path) -> None:
    rows = [_row(i) for i in range(10)]
    rows[7] = rows[1]  # a duplicate beyond the limit: not this run's
    rows[2] = rows[0]  # one within it
    release = _release(tmp_path, rows)
    whole = catalog_release(str(release), batch_lines=2, min_batches=4)[0]
    (trial,) = catalog_release(str(release), batch_lines=2, min_batches=4, limit=4)
    assert (trial.rows, trial.beyond_limit) == (4, 6)
    assert (whole.rows, whole.beyond_limit) == (10, 0)
    data = (release / "s" / "s.jsonl").read_bytes()
    assert trial.batch_offsets[-1] == len(b"".join(r.encode() + b"\n" for r in rows[:4]))
    assert data[: trial.batch_offsets[-1]].count(b"\n") == 4
    assert trial.jsonl_sha256 == whole.jsonl_sha256 and trial.jsonl_bytes == whole.jsonl_bytes
    assert trial.duplicate_rows == ((3, 1),)
    assert whole.duplicate_rows == ((3, 1), (8, 2))
    # the subsets row counts every line: rows = ok + rejected + dropped + beyond_limit
    columns = catalog_columns(trial, None, run_id="r")
    assert columns["rows"] == 10
    # a limit over the line count changes nothing
    (same,) = catalog_release(str(release), batch_lines=2, min_batches=4, limit=10)
    assert same == whole


def test_a_refresh_reruns_a_partial_subset_without_the_limit(tmp_path: Path) -> None:
    release = _release(tmp_path, [_row(i) for i in range(5)])
    (entry,) = catalog_release(str(release))
    previous = {
        "s": {
            "readme_sha256": entry.readme_sha256,
            "jsonl_sha256": entry.jsonl_sha256,
            "rows": 5,
            "beyond_limit": 3,
            "published": True,
        }
    }
    (change,) = plan_refresh([entry], previous).changes
    assert change.action == "rerun" and "--limit" in change.reasons[0], change
    previous["s"]["beyond_limit"] = 0
    assert plan_refresh([entry], previous).changes[0].action == "unchanged"
    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    trial = RunConfig(release=str(release), out=str(out), limit=2)
    (out / "runs" / "t.json").write_text(json.dumps({"config": trial.model_dump(mode="json")}))
    assert refresh_config(str(release), str(out), ["s"]).source.limit is None
