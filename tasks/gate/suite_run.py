"""Run one suite over one profile with Great Expectations, and say in one line what each failure means.

Great Expectations validates the profile and keeps the result (the Data Docs are rendered from it): success
only for a passing suite, every detail for a suite with a failure (see :data:`FIRST_PASS`). A
failed expectation becomes ``"<suite>: <title>: <detail>; e.g. <examples>"``: the title is the
expectation's ``meta.title`` filled with the parameters and the profile, the detail quotes what was
found (``meta.found`` formats it), and the examples are the first rows of the expectation's
``meta.examples`` query, run over the manifest so a reader sees the offending rows, not an aggregate.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .gx import GX_LOCK, quiet_context
from .params import gx_params
from .profiles import sql_params
from .results import GateResult
from .suites import load_suite

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

EXAMPLES = 3  # example rows quoted per failed expectation
# GX's cost per validation is its metric graph, not the data (the profiles are a few rows), and it grows
# with the result format: at the release's shape (76 subsets, most of ~20 rows, warm process) a passing
# subset's gate cost 1.7 s of CPU in SUMMARY, 1.2 s in BASIC, 0.9 s in BOOLEAN_ONLY. Success per
# expectation is the same in every format (from the unexpected count or the observed value, which every
# format computes), so a suite is validated in FIRST_PASS, and again in DETAILED only when one of its
# expectations failed (warn-only too; one failing suite: 1.5 s a subset, both passes included): failure
# lines (found values, examples) and the stored result of a suite with a failure are as before. A passing
# suite keeps its BOOLEAN_ONLY result: success per expectation and the statistics, no observed values, so
# its Data Docs page shows the pass marks and statistics with "--" as observed value ("unknown % not
# null" for a not-null check). BASIC would keep the values, but for a passing expectation they say
# nothing the pass does not ("0% unexpected", a row sum pinned to ``rows``; the one other, the shards
# suite's shard count, is in the run summary), and no code reads them: the CLI, the report and drift read
# the verdicts, the failure lines and the run summaries.
FIRST_PASS = "BOOLEAN_ONLY"
DETAILED = "SUMMARY"


def run_suite(
    result: GateResult,
    suite_name: str,
    frame: pd.DataFrame,
    params: dict[str, Any],
    con: duckdb.DuckDBPyConnection | None,
    modes: Mapping[str, str] | None = None,
) -> None:
    """Validate ``frame`` with the suite ``suite_name`` and add the outcome to ``result``.

    ``con`` holds the manifests' views for the examples queries (None: no examples, as for drift); the
    profile itself is registered there as ``profile`` since some examples point at profile rows.
    ``modes`` (``"<suite>.<name>"`` -> ``off`` | ``warn``, from the gate overrides) leaves an expectation
    out, or turns its failure into a warning that does not fail the suite.
    """
    spec, warn = _relaxed(suite_name, load_suite(suite_name), modes or {}, result)
    expectation_params = gx_params(params)
    validation = _validate(suite_name, spec, frame, expectation_params, FIRST_PASS)
    if not validation.success:  # any expectation failed (warn-only too: its line needs the detail)
        validation = _validate(suite_name, spec, frame, expectation_params, DETAILED)
    if con is not None:
        con.register("profile", frame)
    result.results[suite_name] = validation.to_json_dict()
    # A title is filled with what was asked (the parameters: the catalog's `rows`, the limits), then, from a
    # one-row profile, what was found under the names the parameters do not use: an all-ok subset's samples
    # profile is one row too, and its `rows` (the rows found) must not pass for the catalog's count.
    row0 = frame.iloc[0].to_dict() if len(frame) == 1 else {}
    failed = False
    for r in validation.results:
        if r.success:
            continue
        line = _failure_line(suite_name, spec, r, row0 | params, params, con)
        name = _name(spec, r)
        if name in warn:
            result.warnings.append(f"{line} (warn only: gate overrides)")
        else:
            result.failures.append(line)
            failed = True
    result.suites[suite_name] = not failed
    result.passed = result.passed and not failed


def _relaxed(
    suite_name: str, spec: dict[str, Any], modes: Mapping[str, str], result: GateResult
) -> tuple[dict[str, Any], set[str]]:
    """``spec`` without the expectations switched off, and the names of those only warned about."""
    mine = {k.split(".", 1)[1]: v for k, v in modes.items() if k.split(".", 1)[0] == suite_name}
    result.relaxed.update({f"{suite_name}.{k}": v for k, v in sorted(mine.items())})
    kept = [e for e in spec["expectations"] if mine.get(str((e.get("meta") or {}).get("name"))) != "off"]
    return spec | {"expectations": kept}, {k for k, v in mine.items() if v == "warn"}


def _name(spec: Mapping[str, Any], r: Any) -> str | None:
    """The ``meta.name`` of the expectation behind the result ``r``."""
    meta = r.expectation_config.meta or {}
    exp = spec["expectations"][meta.get("vlmforge_index", 0)]
    name: str | None = (exp.get("meta") or {}).get("name")
    return name


# --------------------------------------------------------------------------------------------------------
# Great Expectations


@lru_cache(maxsize=1)
def _context() -> Any:
    """The gate's GX context (one per process), with one pandas source for the profiles."""
    ctx = quiet_context()
    ctx.data_sources.add_pandas("vlmforge")
    return ctx


def _validate(
    suite_name: str, spec: Mapping[str, Any], frame: pd.DataFrame, params: dict[str, Any], result_format: str
) -> Any:
    """GX's validation of ``frame`` (a whole-frame batch of the asset ``<suite>_profile``) by the suite,
    its results in ``result_format`` (``BOOLEAN_ONLY``, ``BASIC``, ``SUMMARY``)."""
    import great_expectations as gx

    with GX_LOCK:
        batch_def = _batch_definition(suite_name)
        suite = gx.ExpectationSuite(
            name=suite_name,
            expectations=_indexed(spec["expectations"]),
            meta={"version": spec.get("version")},
        )
        batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
        return batch.validate(
            suite, expectation_parameters=params, result_format={"result_format": result_format}
        )


def _batch_definition(suite_name: str) -> Any:
    """The whole-dataframe batch definition of the asset ``<suite>_profile`` (made on first use)."""
    source = _context().data_sources.get("vlmforge")
    asset_name = f"{suite_name}_profile"
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        return asset.get_batch_definition("whole")
    except KeyError:
        return asset.add_batch_definition_whole_dataframe("whole")


def _indexed(expectations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The expectations, each marked with its index in the suite (GX's results do not keep the order)."""
    out = []
    for i, exp in enumerate(expectations):
        exp = dict(exp)
        exp["meta"] = dict(exp.get("meta") or {}) | {"vlmforge_index": i}
        out.append(exp)
    return out


# --------------------------------------------------------------------------------------------------------
# Failure lines


def _failure_line(
    suite_name: str,
    spec: Mapping[str, Any],
    r: Any,
    values: Mapping[str, Any],
    params: Mapping[str, Any],
    con: duckdb.DuckDBPyConnection | None,
) -> str:
    """``"<suite>: <title>: <detail>; e.g. <examples>"`` for the failed expectation result ``r``."""
    meta = r.expectation_config.meta or {}
    exp_spec = spec["expectations"][meta.get("vlmforge_index", 0)]
    exp_meta = exp_spec.get("meta") or {}
    title = _title(exp_meta.get("title") or r.expectation_config.type, values)
    examples = _examples(con, exp_meta.get("examples"), params)
    if (
        "found" in exp_meta
        and exp_meta["found"] is None
        and not (r.exception_info or {}).get("raised_exception")
    ):
        detail = ""  # the title says it all (drift)
    else:
        detail = ": " + _detail(r, exp_meta.get("found"))
    return f"{suite_name}: {title}{detail}{examples}"


class _Fmt(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _title(template: str, values: Mapping[str, Any]) -> str:
    shown = {k: ("no limit" if v is None else v) for k, v in values.items()}
    try:
        return template.format_map(_Fmt(shown))
    except (ValueError, TypeError, KeyError, IndexError):
        return template


def shorten(value: Any, width: int = 80) -> str:
    """``str(value)``, cut to ``width`` characters with an ellipsis."""
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _plain(value: Any) -> Any:
    """numpy scalars and integral floats as plain Python numbers; pairs element by element."""
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _found(template: str | None, value: Any) -> str:
    value = _plain(value)
    if template:
        try:
            return template.format(value)
        except (ValueError, TypeError, IndexError, KeyError):
            pass
    return shorten(value, 60)


def _detail(result: Any, found: str | None = None) -> str:
    res = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"could not be checked: {shorten(result.exception_info.get('exception_message'), 200)}"
    unexpected = res.get("partial_unexpected_list")
    if unexpected:
        return "found " + ", ".join(_found(found, v) for v in unexpected[:5])
    if "observed_value" in res:
        return f"observed {res.get('observed_value')}"
    return "failed"


def _examples(con: duckdb.DuckDBPyConnection | None, sql: str | None, params: Mapping[str, Any]) -> str:
    """``"; e.g. <first rows of sql>"`` ("" without a query, a connection or one of its parameters)."""
    if con is None or not sql:
        return ""
    names = sql_params(sql)
    if any(params.get(n) is None for n in names):
        return ""
    try:
        rel = con.execute(f"SELECT * FROM ({sql}) LIMIT {EXAMPLES}", {n: params[n] for n in names})
        cols = [d[0] for d in rel.description or []]
        rows = rel.fetchall()
    except Exception as exc:  # noqa: BLE001 - examples are a courtesy; the failure itself stands
        return f" (examples unavailable: {shorten(exc, 120)})"
    if not rows:
        return ""
    shown = "; ".join(
        " ".join(f"{c}={shorten(_plain(v), 60)}" for c, v in zip(cols, row, strict=True)) for row in rows
    )
    return f"; e.g. {shown}"
