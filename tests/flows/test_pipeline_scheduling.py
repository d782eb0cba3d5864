"""The run's schedule: a subset's gate, publish and read-back start on its own batches' completion, not
after every batch of the run, and a subset with a failed batch or nothing ok stops where it should. The
order is asserted from the events the schedule records (the run record keeps them), never from clocks."""

from __future__ import annotations

from vlmforge.flows.schedule import GATE, PUBLISH, VALIDATE, SubsetSchedule
from vlmforge.tasks.batch.stats import BatchStats


def _ok(n: int = 1) -> BatchStats:
    return BatchStats(lines=n, ok=n, batches=1)


def test_a_subset_is_gated_published_and_validated_while_another_still_has_batches() -> None:
    s = SubsetSchedule([("small", 2), ("big", 5)], skip_gate=False)
    started = []
    for subset in ("small", "big", "small", "big"):  # batches finish interleaved
        if s.batch_done(subset, _ok()):
            started.append(s.batches_finished(subset))
    assert started == [GATE]  # small's gate starts with big's batches outstanding
    assert s.subsets["big"].remaining == 3
    assert s.gate_done("small", passed=True) == PUBLISH
    assert s.publish_done("small", published=True) == VALIDATE
    s.validate_done("small")
    for _ in range(3):
        last = s.batch_done("big", _ok())
    assert last and s.batches_finished("big") == GATE
    events = s.events
    assert events.index("publish started small") < events.index("batches done big")
    assert events.index("validate done small") < events.index("batches done big")
    assert s.subsets["small"].stats.ok == 2 and s.subsets["big"].stats.ok == 5


def test_skip_gate_goes_straight_to_publish() -> None:
    s = SubsetSchedule([("a", 1)], skip_gate=True)
    assert s.batch_done("a", _ok())
    assert s.batches_finished("a") == PUBLISH


def test_a_failed_batch_holds_its_subset_back_and_keeps_the_first_error() -> None:
    s = SubsetSchedule([("a", 3)], skip_gate=False)
    s.batch_done("a", "batch failed: first")
    s.batch_done("a", _ok())
    assert s.batch_done("a", "batch failed: second")
    assert s.batches_finished("a") is None
    assert s.subsets["a"].error == "batch failed: first"
    assert "gate started a" not in s.events


def test_nothing_ok_is_not_published_and_a_failed_gate_stops_there() -> None:
    s = SubsetSchedule([("none_ok", 1), ("bad", 1)], skip_gate=False)
    s.batch_done("none_ok", BatchStats(lines=3, rejected=3, batches=1))
    assert s.batches_finished("none_ok") == GATE
    assert s.gate_done("none_ok", passed=True) is None  # nothing to publish
    s.batch_done("bad", _ok())
    assert s.batches_finished("bad") == GATE
    assert s.gate_done("bad", passed=False) is None
    assert not any(e.startswith("publish") for e in s.events)


def test_an_empty_subset_is_ready_at_once() -> None:
    s = SubsetSchedule([("empty", 0), ("a", 1)], skip_gate=False)
    assert s.ready_now() == ["empty"]
