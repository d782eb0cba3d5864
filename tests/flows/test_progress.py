"""The terminal progress display: counts what the flow reports, and is inert without a terminal."""

from __future__ import annotations

from vlmforge.flows import progress


def test_stages_count_their_units_while_the_display_is_live() -> None:
    with progress.terminal_progress(enabled=True):
        progress.stage("batches", 3)
        for _ in range(3):
            progress.advance("batches")
        progress.stage("gate", 2)
        progress.advance("gate")
        display = progress._display
        assert display is not None
        done = {t.description: (t.completed, t.total) for t in display.tasks}
    assert done == {"batches": (3, 3), "gate": (1, 2)}
    assert progress._display is None  # closed with the block


def test_without_a_terminal_every_call_is_a_no_op() -> None:
    with progress.terminal_progress(enabled=False):
        progress.stage("batches", 3)
        progress.advance("batches")
        assert progress._display is None and not progress._tasks
