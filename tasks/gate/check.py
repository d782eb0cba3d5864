"""The quality gate of one subset: the ``samples``, ``media`` and ``drift`` suites between its manifests
and its shards. A subset that fails is not published; its previous dataset stays.

Reads top to bottom: the effective parameters (:mod:`.params`), the DuckDB profiles of the manifests
(:mod:`.profiles`), each suite validated over its profile (:mod:`.validate`), drift against the last
published run (:mod:`.drift`). :func:`gate_subset` is the one entry: what a subset's gate reads, from the
run's gate options, model and knobs (``GateWork``) and the output folder (:func:`gate_inputs`), then validated
(:func:`gate_one`; tests put rows built to break an expectation in place of the manifests between the two).
The ``shards`` suite runs later, on the staged Energon dataset (:mod:`.shards`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..geometry import geometry_of
from ..manifests import OutputLayout
from .drift import Baseline, drift_profile, last_published
from .params import GateOverrides, gate_params, load_overrides
from .profiles import ManifestParts, Source, media_profile, open_views, samples_profile
from .results import GateResult
from .suite_run import run_suite
from .suites import GATE_SUITES

if TYPE_CHECKING:
    from ...schemas.records import SubsetEntry
    from ...schemas.stage_options import GateWork


def gate_subset(
    work: GateWork,
    entry: SubsetEntry,
    *,
    run_id: str | None = None,
    overrides: GateOverrides | None = None,
) -> GateResult:
    """The flow's gate for one subset: its manifests under ``work.out``, the gate options, the model and
    knobs, the gate overrides (``work.gate.gate_overrides``) and the subset's last published run."""
    if overrides is None:
        overrides = load_overrides(work.gate.gate_overrides)
    return gate_one(gate_inputs(work, entry, run_id=run_id, overrides=overrides))


@dataclass(frozen=True)
class GateInputs:
    """What one subset's gate reads: its manifests, its effective parameters (``rows`` and
    ``factor_squared`` included), its expectation modes from the gate overrides and its baseline."""

    subset: str
    samples: Source
    media: Source
    params: dict[str, Any]
    modes: Mapping[str, str] = field(default_factory=dict)
    baseline: Baseline | None = None


def gate_inputs(
    work: GateWork, entry: SubsetEntry, *, run_id: str | None, overrides: GateOverrides
) -> GateInputs:
    """The gate inputs of one subset of the run (its manifests under ``work.out``)."""
    layout = OutputLayout(work.out)
    geometry = geometry_of(work.tokens, work.media)
    return GateInputs(
        subset=entry.subset,
        samples=ManifestParts.of(layout, "samples", entry.subset),
        media=ManifestParts.of(layout, "media", entry.subset),
        params=gate_params(
            entry.subset,
            max_pixels=geometry.bounds.image_max_pixels,
            min_pixels=geometry.bounds.image_min_pixels,
            seq_len=work.tokens.seq_len,
            max_num_images=work.tokens.max_num_images,
            max_reject_rate=work.gate.max_reject_rate,
            overrides=overrides,
        )
        | {
            "rows": entry.rows,  # the catalog's line count
            "factor_squared": geometry.token_factor**2 if geometry.token_factor else None,
        },
        modes=overrides.expectations_for(entry.subset),
        # a trial run (--limit) takes part of the rows: no drift to measure against a whole run
        baseline=None if entry.beyond_limit else last_published(layout, entry.subset, exclude_run=run_id),
    )


def gate_one(inputs: GateInputs, suites: Sequence[str] = GATE_SUITES) -> GateResult:
    """Validate one subset's ``suites`` (a validation per suite; :mod:`.groups` shares them). ``samples`` and
    ``media`` are Arrow tables or :class:`~.profiles.ManifestParts`; parameters that are None mean no limit;
    ``suites`` picks some of ``samples``, ``media`` and ``drift`` (default: all)."""
    _check_suite_names(suites)
    t0 = time.perf_counter()
    params = inputs.params
    result = GateResult(subset=inputs.subset, passed=True, params=params, stage="gate")
    modes = inputs.modes
    with open_views({"samples": inputs.samples, "media": inputs.media}) as con:
        sprof = samples_profile(con)
        if "samples" in suites:
            run_suite(result, "samples", sprof, params, con, modes)
        if "media" in suites:
            run_suite(result, "media", media_profile(con, params["factor_squared"]), params, con, modes)
    if "drift" in suites:
        run_suite(result, "drift", drift_profile(sprof, inputs.baseline), params, None, modes)
    result.seconds = time.perf_counter() - t0
    return result


def _check_suite_names(suites: Sequence[str]) -> None:
    unknown = set(suites) - set(GATE_SUITES)
    if unknown:
        raise ConfigError(f"unknown gate suite(s) {sorted(unknown)}; the gate runs {', '.join(GATE_SUITES)}")
