"""How a run groups its work into tasks (``flows/grouping.py``): small subsets' batches share a task, a large
subset's batches stay one task each, packing never leaves the window short of tasks, and the subsets that
become ready for a stage while its tasks are busy ride together in the next task of that stage."""

from __future__ import annotations

from vlmforge.flows.grouping import MAX_GROUP, StageQueues, batch_line_count, pack_batches
from vlmforge.schemas.records import SubsetEntry


def entry(name: str, rows: int, batch_lines: int) -> SubsetEntry:
    """A subset of ``rows`` lines planned in batches of ``batch_lines`` (offsets stand in for bytes)."""
    n = -(-rows // batch_lines)
    return planned(name, rows, [1 + i * batch_lines for i in range(n)])


def planned(name: str, rows: int, first_lines: list[int]) -> SubsetEntry:
    return SubsetEntry(
        subset=name,
        path=f"/r/{name}",
        readme_sha256="0" * 64,
        jsonl=f"/r/{name}/{name}.jsonl",
        jsonl_sha256="0" * 64,
        jsonl_bytes=rows,
        license="CC-BY-4.0",
        license_text="CC-BY-4.0",
        rows=rows,
        batch_offsets=tuple(range(len(first_lines) + 1)),
        batch_first_lines=tuple(first_lines),
    )


def units_of(entries: list[SubsetEntry]) -> list[tuple[SubsetEntry, int]]:
    return [(e, i) for e in entries for i in range(len(e.batch_offsets) - 1)]


def test_a_long_tail_of_small_subsets_is_packed_and_a_large_subsets_batches_stay_alone() -> None:
    batch_lines, window = 256, 4
    # v3's shape: one large subset, a long tail of small ones (20,000 rows in all)
    sizes = [8_000, 3_000, 1_500] + [100] * 40 + [12] * 33
    entries = [entry(f"s{i:02d}", rows, batch_lines) for i, rows in enumerate(sizes)]
    units = units_of(entries)
    packs = pack_batches(units, batch_lines, window)

    assert [u for p in packs for u in p] == units  # every batch once, in order
    tail = [p for p in packs if p[0][0].rows <= 100]
    assert len(tail) < 73 // 3  # 73 tail subsets do not cost a task each (4,396 rows: 22 tasks)
    assert len(packs) >= window  # every slot of the window has work
    for p in packs:
        lines = sum(batch_line_count(e, i, batch_lines) for e, i in p)
        assert len(p) == 1 or lines <= batch_lines, (p, lines)
    big = [p for p in packs if p[0][0].subset == "s00"]
    assert all(len(p) == 1 for p in big) and len(big) == 32  # 8,000 rows: 32 batches of 250


def test_a_small_release_is_not_packed_below_the_window() -> None:
    batch_lines, window = 10_000, 4
    entries = [entry(f"s{i}", rows, batch_lines) for i, rows in enumerate([12, 9, 7, 6])]
    # the catalog split the tiny release for the cores (min_batches): packing must not undo it
    split = [planned(e.subset, e.rows, list(range(1, e.rows + 1))) for e in entries]  # a line a batch
    packs = pack_batches(units_of(split), batch_lines, window)
    assert len(packs) >= window


def test_subsets_ready_while_a_stage_is_busy_ride_in_its_next_task() -> None:
    q: StageQueues[str] = StageQueues(("gate", "publish"), slots=1)
    q.add("gate", "a")
    assert q.take() == [("gate", ["a"])]  # a free slot: at once, alone
    for s in ("b", "c", "d"):
        q.add("gate", s)
    q.add("publish", "a")
    assert q.take() == [("publish", ["a"])]  # the gate's slot is busy: b, c, d wait
    q.done("gate")
    assert q.take() == [("gate", ["b", "c", "d"])]  # one task for the three
    assert q.take() == []


def test_a_stage_task_holds_at_most_max_group_subsets() -> None:
    q: StageQueues[int] = StageQueues(("validate",), slots=2)
    for i in range(MAX_GROUP * 2 + 3):
        q.add("validate", i)
    groups = q.take()
    assert [len(g) for _, g in groups] == [MAX_GROUP, MAX_GROUP]  # both slots, full groups
    q.done("validate")
    assert q.take() == [("validate", [MAX_GROUP * 2, MAX_GROUP * 2 + 1, MAX_GROUP * 2 + 2])]
