"""The estimate's sampling and bandwidth have one default each (tasks/estimate): ``catalog --estimate`` and
the ``vlmforge-estimate`` flow show and use that one."""

from __future__ import annotations

import dataclasses
import inspect

import typer

from vlmforge.flows.cli import app
from vlmforge.flows.estimate_flow import estimate_flow
from vlmforge.tasks.estimate import EstimateOptions, parse_bandwidth

DECLARED = {f.name: f.default for f in dataclasses.fields(EstimateOptions)}
SHARED = ("probe_sample", "decode_sample", "bandwidth", "seed", "cores")


def _as_declared(name: str, value: object) -> object:
    """A default as EstimateOptions holds it (the bandwidth is typed as text: ``1Gbit``)."""
    return parse_bandwidth(value) if name == "bandwidth" and isinstance(value, str) else value


def test_catalog_estimate_options_default_to_the_estimates() -> None:
    catalog = typer.main.get_command(app).commands["catalog"]  # type: ignore[attr-defined]
    shown = {p.name: p.default for p in catalog.params if p.name in SHARED}
    assert set(shown) == set(SHARED)
    assert {k: _as_declared(k, v) for k, v in shown.items()} == {k: DECLARED[k] for k in SHARED}


def test_estimate_flow_parameters_default_to_the_estimates() -> None:
    params = inspect.signature(estimate_flow.fn).parameters
    given = {k: params[k].default for k in SHARED}
    assert {k: _as_declared(k, v) for k, v in given.items()} == {k: DECLARED[k] for k in SHARED}
