"""``make test`` and ``make check`` keep a module's tests on one pytest-xdist worker (``--dist loadgroup``,
the groups set in ``conftest.py``), so a module's fixtures (a reference run, a Ray cluster, the Bridge probe)
are made once. xdist reads a test's group from its node id, which its worker rewrites: pytest 9.2 moved the
node id where that rewrite no longer reaches, and a conftest hook that ran after xdist's set groups nobody
read. Either way every test became its own group, silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_this_modules_tests_share_one_xdist_group(request: pytest.FixtureRequest) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") or not request.config.getvalue("loadgroup"):
        pytest.skip("runs under pytest-xdist's --dist loadgroup (make test, make check)")
    assert request.node.nodeid.endswith(f"@{Path(__file__)}"), request.node.nodeid


def test_groups_with_a_slow_test_are_collected_first(request: pytest.FixtureRequest) -> None:
    """So that xdist hands out the long groups first and the quick ones fill the tail (``conftest.py``)."""
    items = request.session.items
    group = {id(i): str(i.get_closest_marker("xdist_group").args[0]) for i in items}  # type: ignore[union-attr]
    slow = {group[id(i)] for i in items if i.get_closest_marker("slow") is not None}
    seen_quick = False
    for item in items:
        seen_quick = seen_quick or group[id(item)] not in slow
        assert not (seen_quick and group[id(item)] in slow), f"{item.nodeid} is after a quick group"
