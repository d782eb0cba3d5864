"""The gate of several subsets at once: one Great Expectations validation per suite over their profiles.

GX's cost is per validation, not per row (the profiles are a few rows): the ``samples`` suite over 32
subsets' concatenated profiles in one validation cost 0.42 CPU-s against 12.77 over each. So the subsets
that a suite would validate with the same expectations and the same parameters (a *partition*: the
suite's ``$PARAMETER`` values but ``rows``, and its expectation modes from the gate overrides) share one
validation of their concatenated profiles, with a ``subset`` column.

Every expectation of the gate suites but one is per profile row (a value in a set or between bounds, not
null): it holds over the concatenation exactly when it holds over each subset's rows. The exception is
``samples.rows_per_line``, the sum of a subset's ``rows`` pinned to its catalog line count: in a group it
is rewritten (:func:`group_suite`) to compare, on every row, the sum of the subset's rows with its catalog
rows, both added to the profile (:func:`group_frame`), so it stays exact per subset.

A passing group validation means every subset of it passed the suite: each subset stores the group's
result, its meta naming the group (``vlmforge_group``). A failing one says nothing about which subset
failed: each is validated again alone (:func:`.suite_run.run_suite`), so its failure lines, warnings and
stored result are those of the per-subset gate. Subsets alone in their partition, and empty profiles of a
suite that counts rows, take the per-subset path too.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .check import GateInputs, gate_inputs
from .drift import drift_profile
from .params import gx_params, load_overrides
from .profiles import media_profile, open_views, samples_profile
from .results import GateResult
from .suite_run import FIRST_PASS, _relaxed, _validate, run_suite
from .suites import GATE_SUITES, load_suite

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from ...schemas.records import SubsetEntry
    from ...schemas.stage_options import GateWork
    from .params import GateOverrides

GROUP_META = "vlmforge_group"  # the meta key of a stored group result: the subsets it validated
SUBSET_COLUMN = "subset"
SUBSET_ROWS = "subset_rows"  # the sum of a subset's profile rows, on each of its rows
CATALOG_ROWS = "catalog_rows"  # the subset's catalog line count (``$rows``), on each of its rows
# Expectations that hold over concatenated profiles exactly when they hold over each subset's rows (without
# ``mostly``, a share of the whole group); an aggregate (a sum, a mean, a row count, uniqueness) does not.
ROW_WISE = frozenset(
    {
        "expect_column_values_to_be_in_set",
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
        "expect_column_pair_values_to_be_equal",
    }
)
SUITES_WITH_VIEWS = ("samples", "media")  # their failure lines quote manifest rows (drift's do not)


def gate_subsets(
    work: GateWork,
    entries: Sequence[SubsetEntry],
    run_id: str | None = None,
    overrides: GateOverrides | None = None,
) -> list[GateResult]:
    """The flow's gate of several subsets (:func:`.check.gate_subset` of each, validations shared)."""
    if overrides is None:
        overrides = load_overrides(work.gate.gate_overrides)
    return gate_group([gate_inputs(work, e, run_id=run_id, overrides=overrides) for e in entries])


@dataclass
class _Profiled:
    """One subset of the group: its inputs, its profile per suite, and its result as it fills."""

    inputs: GateInputs
    profiles: dict[str, pd.DataFrame]
    result: GateResult
    seconds: float = 0.0

    @property
    def subset(self) -> str:
        return self.inputs.subset


# suite -> subset -> the result JSON of the group validation that the subset passed
_GroupPasses = dict[str, dict[str, dict[str, Any]]]


def gate_group(inputs: Sequence[GateInputs]) -> list[GateResult]:
    """The gate (``samples``, ``media``, ``drift``) of each subset of ``inputs``, in their order."""
    members = [_profile(i) for i in inputs]
    passes: _GroupPasses = {suite: {} for suite in GATE_SUITES}
    for suite in filter(groupable, GATE_SUITES):
        for partition in _partitions(suite, members):
            _validate_partition(suite, partition, passes)
    for m in members:
        _finish(m, passes)
    return [m.result for m in members]


def _profile(inputs: GateInputs) -> _Profiled:
    """A subset's profiles, as :func:`.check.gate_one` computes them."""
    t0 = time.perf_counter()
    with open_views({"samples": inputs.samples, "media": inputs.media}) as con:
        sprof = samples_profile(con)
        mprof = media_profile(con, inputs.params["factor_squared"])
    profiles = {"samples": sprof, "media": mprof, "drift": drift_profile(sprof, inputs.baseline)}
    result = GateResult(subset=inputs.subset, passed=True, params=inputs.params, stage="gate")
    return _Profiled(inputs, profiles, result, time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------------------
# Partitions and group validations


def suite_parameters(spec: Mapping[str, Any]) -> set[str]:
    """The names of every ``$PARAMETER`` the suite's expectations refer to."""
    return {name for e in spec["expectations"] for name in _parameter_names(e["kwargs"])}


def _parameter_names(value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        if "$PARAMETER" in value:
            yield str(value["$PARAMETER"])
        for v in value.values():
            yield from _parameter_names(v)
    elif isinstance(value, list):
        for v in value:
            yield from _parameter_names(v)


def _partition_key(suite: str, shared: Sequence[str], m: _Profiled) -> Hashable:
    """What parametrises ``suite`` for the subset but its own ``rows``: the suite's expectation modes and
    its ``shared`` parameters (all but ``rows``) as GX sees them."""
    values = gx_params(m.inputs.params)
    modes = sorted((k, v) for k, v in m.inputs.modes.items() if k.split(".", 1)[0] == suite)
    return tuple(modes), tuple((name, values.get(name)) for name in shared)


def _partitions(suite: str, members: Sequence[_Profiled]) -> list[list[_Profiled]]:
    """The groups of two or more subsets that one validation of ``suite`` can check together. An empty
    profile joins a group unless the suite counts the subset's rows: a row-wise expectation holds over no
    rows, as it does when the subset is validated alone, but the rows' sum of an empty profile is 0."""
    names = suite_parameters(load_suite(suite))
    counts_rows, shared = "rows" in names, sorted(names - {"rows"})
    by_key: dict[Hashable, list[_Profiled]] = defaultdict(list)
    for m in members:
        if len(m.profiles[suite]) or not counts_rows:
            by_key[_partition_key(suite, shared, m)].append(m)
    return [group for group in by_key.values() if len(group) > 1]


def _validate_partition(suite: str, partition: Sequence[_Profiled], passes: _GroupPasses) -> None:
    """One validation of ``suite`` over the partition's profiles; on success, each subset passed it. The
    validation's CPU time is shared out among the subsets' ``seconds``."""
    t0 = time.perf_counter()
    first = partition[0].inputs
    spec, _warn = _relaxed(suite, load_suite(suite), first.modes, GateResult(first.subset, True))
    grouped = group_suite(spec)
    params = shared_params(grouped, [m.inputs.params for m in partition])
    frame = group_frame([(m.subset, m.profiles[suite], m.inputs.params["rows"]) for m in partition])
    validation = _validate(suite, grouped, frame, params, FIRST_PASS)
    if validation.success:
        stored = _group_result(validation.to_json_dict(), [m.subset for m in partition])
        passes[suite].update({m.subset: stored for m in partition})
    share = (time.perf_counter() - t0) / len(partition)
    for m in partition:
        m.seconds += share


def groupable(suite: str) -> bool:
    """Whether one validation of ``suite`` over several subsets' profiles checks each subset (else each
    subset is validated alone)."""
    try:
        group_suite(load_suite(suite))
    except ValueError:
        return False
    return True


def group_suite(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` for a validation over several subsets' profiles: the sum of ``rows`` pinned to ``$rows``
    becomes a per-row comparison of each subset's sum with its catalog rows (:func:`group_frame`).
    ValueError when another expectation refers to ``$rows`` (it could not be checked per subset)."""
    out = []
    for e in spec["expectations"]:
        if _is_rows_sum(e):
            e = e | {
                "type": "expect_column_pair_values_to_be_equal",
                "kwargs": {"column_A": SUBSET_ROWS, "column_B": CATALOG_ROWS},
            }
        elif "rows" in set(_parameter_names(e["kwargs"])):
            raise ValueError(f"expectation {e['type']} refers to $rows: no per-subset form for a group")
        elif e["type"] not in ROW_WISE or "mostly" in e["kwargs"]:
            raise ValueError(
                f"expectation {e['type']} is not row by row: a group would not check each subset"
            )
        out.append(e)
    return dict(spec) | {"expectations": out}


def _is_rows_sum(e: Mapping[str, Any]) -> bool:
    pinned = {"$PARAMETER": "rows"}
    kwargs = e["kwargs"]
    return (
        e["type"] == "expect_column_sum_to_be_between"
        and kwargs.get("column") == "rows"
        and kwargs.get("min_value") == pinned
        and kwargs.get("max_value") == pinned
        and set(kwargs) == {"column", "min_value", "max_value"}
    )


def shared_params(spec: Mapping[str, Any], params: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The GX parameters of the group: those of its subsets, which must agree on every ``$PARAMETER`` the
    (group) suite refers to (ValueError otherwise: the subsets do not belong in one validation)."""
    values = [gx_params(p) for p in params]
    for name in suite_parameters(spec):
        differing = {repr(v.get(name)) for v in values}
        if len(differing) > 1:
            raise ValueError(f"${name} differs within a gate group: {sorted(differing)}")
    return values[0]


def group_frame(profiles: Sequence[tuple[str, pd.DataFrame, int]]) -> pd.DataFrame:
    """The profiles ``(subset, profile, catalog rows)`` one under the other, each row with its ``subset``
    and, when the profile counts ``rows``, the sum of its subset's rows and the subset's catalog rows."""
    import pandas as pd

    parts = []
    # an empty profile adds no row, but concatenated it could turn a typed column into objects
    nonempty = [p for p in profiles if len(p[1])] or list(profiles[:1])
    for subset, profile, catalog_rows in nonempty:
        part = profile.assign(**{SUBSET_COLUMN: subset})
        if "rows" in profile.columns:
            part[SUBSET_ROWS] = profile["rows"].sum()
            part[CATALOG_ROWS] = catalog_rows
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def _group_result(data: dict[str, Any], subsets: Sequence[str]) -> dict[str, Any]:
    """The group's validation result as each of its subsets stores it: the meta names the group."""
    meta = dict(data.get("meta") or {})
    meta[GROUP_META] = {
        "subsets": list(subsets),
        "note": "one validation over these subsets' concatenated profiles; it passed, so each subset "
        "passed (rows_per_line compared per subset: subset_rows = catalog_rows)",
    }
    return data | {"meta": meta}


# --------------------------------------------------------------------------------------------------------
# Each subset's result


def _finish(m: _Profiled, passes: _GroupPasses) -> None:
    """The subset's result, suite by suite in the gate's order: a group's pass, or its own validation."""
    t0 = time.perf_counter()
    result, inputs = m.result, m.inputs
    with ExitStack() as stack:
        views: duckdb.DuckDBPyConnection | None = None
        for suite in GATE_SUITES:
            stored = passes[suite].get(m.subset)
            if stored is not None:
                _record_group_pass(result, suite, stored, inputs.modes)
                continue
            if suite in SUITES_WITH_VIEWS and views is None:  # opened again only for a suite alone
                views = stack.enter_context(open_views({"samples": inputs.samples, "media": inputs.media}))
            con = views if suite in SUITES_WITH_VIEWS else None
            run_suite(result, suite, m.profiles[suite], inputs.params, con, inputs.modes)
    result.seconds = m.seconds + time.perf_counter() - t0


def _record_group_pass(
    result: GateResult, suite: str, stored: dict[str, Any], modes: Mapping[str, str]
) -> None:
    """What :func:`.suite_run.run_suite` records for a passing suite, with the group's result."""
    _relaxed(suite, load_suite(suite), modes, result)  # records the subset's relaxed expectations
    result.results[suite] = stored
    result.suites[suite] = True
