"""The test-only stage-event hooks of ``flows/runtime/faults.py``: exact positions, inert when unset."""

from __future__ import annotations

from collections import Counter

import pytest

from vlmforge.flows.runtime import faults, progress


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Arm the kill hook in this process, with a recorder instead of the SIGKILL."""
    killed: list[str] = []
    monkeypatch.setattr(faults, "_counts", Counter())
    monkeypatch.setattr(faults, "ACTIVE", True)
    monkeypatch.setattr(faults, "_kill_everything", killed.append)
    return killed


def test_unset_hooks_are_inert() -> None:
    assert not faults.ACTIVE  # the test process has neither variable
    progress.stage("batches", 3)
    progress.advance("batches")
    assert not faults._counts


STEPS = (
    ("startup", lambda: progress.milestone("startup")),  # startup:1
    ("declare", lambda: progress.stage("batches", 3)),  # batches:0
    ("first", lambda: progress.advance("batches")),  # batches:1
    ("second", lambda: progress.advance("batches")),  # batches:2
    ("third", lambda: progress.advance("batches")),  # batches:3
)


@pytest.mark.parametrize(
    ("point", "fires_at"),
    [(("startup", 1), "startup"), (("batches", 0), "declare"), (("batches", 2), "second")],
)
def test_the_kill_fires_at_exactly_its_event(
    kills: list[str], monkeypatch: pytest.MonkeyPatch, point: tuple[str, int], fires_at: str
) -> None:
    monkeypatch.setattr(faults, "_KILL_AT", point)
    for name, step in STEPS:
        step()
        if name == fires_at:
            break
        assert kills == [], name  # not before its event
    assert kills == [f"{point[0]}:{point[1]}"]


def test_a_jump_past_the_point_still_fires(kills: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "_KILL_AT", ("gate", 2))
    progress.stage("gate", 4)
    progress.advance("gate", 3)  # 0 -> 3 crosses 2
    assert kills == ["gate:2"]


def test_a_malformed_point_is_refused() -> None:
    with pytest.raises(ValueError, match="<stage>:<n>"):
        faults._parse_point("batches")
    assert faults._parse_point("batches:3") == ("batches", 3)
    assert faults._parse_point(None) is None
