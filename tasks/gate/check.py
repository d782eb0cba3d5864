"""Quality gate: run the Great Expectations suites of ``expectations/`` over one subset's manifests.

The suites are data (JSON, versioned with the code): ``samples``, ``media`` and ``drift`` run between the
manifests and the shards (:func:`run_gate`, :func:`gate_subset`); ``shards`` runs on the staged Energon
dataset before it is swapped into place (:func:`check_shards`, :func:`shards_check`).

Engine. Great Expectations' pandas engine needs minutes for millions of rows (it hashes the whole frame,
filters it once per metric and checks some types value by value), so the gate does not hand it the
manifest. DuckDB scans every row of the manifest once and aggregates it into the subset's *profile*, a
handful of rows (one per status value for ``samples``; per kind, status and owning sample's status for
``media``; per shard for ``shards``) whose columns are the facts the expectations bound: counts of
violating rows, minima, maxima, shares. Great Expectations then validates the profile with the suite,
keeps the result and renders Data Docs from it. A row-level violation anywhere shows up in the profile,
so a suite passes exactly when the row-level check would; when it fails, the suite's ``meta.examples``
query is run over the manifest and its first rows are quoted in the readable failure line.

Parameters (``$PARAMETER`` in the suites) come from :data:`DEFAULT_PARAMS`, the run's options and the
model preset, then per-subset overrides: ``expectations/overrides.json`` (shipped, empty) and a user file
of the same shape (``--gate-overrides PATH``), see :func:`load_overrides`.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa

from ..errors import ConfigError, GateFailed

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    from fsspec import AbstractFileSystem

    from ...schemas.config import RunConfig
    from ...schemas.records import SubsetEntry
    from ..manifests import OutputLayout

# Great Expectations reads this at import time; the gate must never phone home.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

SUITES = ("samples", "media", "drift", "shards")
GATE_SUITES = (
    "samples",
    "media",
    "drift",
)  # between manifests and shards; "shards" runs on the staged dataset
UNBOUNDED = 2**62
ENGINE = "duckdb profile + great_expectations pandas"
EXAMPLES = 3  # example rows quoted per failed expectation

# Defaults of every parameter a subset may override (None: no limit / check off).
DEFAULT_PARAMS: dict[str, float | int | None] = {
    "max_reject_rate": 0.01,
    "seq_len": None,
    "max_num_images": None,
    "min_pixels": None,
    "max_pixels": None,
    "min_media_bytes": 1,
    "max_media_bytes": 4 * 1024**3,
    "max_rows_change": 0.05,
    "max_token_change": 0.05,
    "max_reject_rate_change": 0.01,
}
OVERRIDABLE = tuple(DEFAULT_PARAMS)
# What None means when Great Expectations needs a number.
_NONE_AS = {"min_pixels": 0, "min_media_bytes": 0}
# Filled by the gate itself, never overridable.
COMPUTED_PARAMS = ("rows", "ok_samples", "factor_squared")


class ShardsGateFailed(GateFailed):
    """The staged Energon dataset of a subset failed the ``shards`` suite; the published one stays."""


# --------------------------------------------------------------------------------------------------------
# Results


@dataclass
class GateResult:
    """Outcome of one gate stage (``gate``: samples, media, drift; ``shards``) for one subset."""

    subset: str
    passed: bool
    failures: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)  # suite -> GX validation result (JSON)
    suites: dict[str, bool] = field(default_factory=dict)  # suite -> passed
    params: dict[str, Any] = field(default_factory=dict)  # effective parameters (None: no limit)
    stage: str = "gate"
    seconds: float = 0.0
    engine: str = ENGINE

    def summary(self) -> str:
        return "passed" if self.passed else "failed: " + "; ".join(self.failures)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateResult:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class Baseline:
    """A subset's counts in its last published run: what drift is measured against."""

    run_id: str
    rows: int
    token_sum: int  # total tokens of the ok samples
    rejected: int

    @property
    def reject_rate(self) -> float:
        return self.rejected / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class ManifestParts:
    """Parquet parts of one manifest table of one subset (read by DuckDB in place, projected)."""

    paths: tuple[str, ...]
    fs: AbstractFileSystem
    schema: pa.Schema

    @classmethod
    def of(cls, layout: OutputLayout, table: str, subset: str) -> ManifestParts:
        from ...schemas.manifests import TABLES

        return cls(tuple(layout.parts(table, subset)), layout.fs, TABLES[table])


Source: TypeAlias = pa.Table | ManifestParts


# --------------------------------------------------------------------------------------------------------
# Suites and overrides


@cache
def _suite_text(name: str) -> str:
    return resources.files("vlmforge.expectations").joinpath(f"{name}.json").read_text()


def load_suite(name: str) -> dict[str, Any]:
    """The suite ``expectations/<name>.json`` as a dict (a fresh copy)."""
    suite: dict[str, Any] = json.loads(_suite_text(name))
    return suite


def _is_pattern(key: str) -> bool:
    return any(c in key for c in "*?[")


@dataclass(frozen=True)
class GateOverrides:
    """Per-subset parameter overrides, in the order they apply (shipped file first, then the user's)."""

    entries: tuple[tuple[str, Mapping[str, float | int | None]], ...] = ()
    files: tuple[str, ...] = ()

    def for_subset(self, subset: str) -> dict[str, float | int | None]:
        """Merged overrides of ``subset``: matching patterns first (in order), then exact names."""
        out: dict[str, float | int | None] = {}
        for key, values in self.entries:
            if _is_pattern(key) and fnmatch.fnmatchcase(subset, key):
                out.update(values)
        for key, values in self.entries:
            if not _is_pattern(key) and key == subset:
                out.update(values)
        return out


def _parse_overrides(data: Any, where: str) -> list[tuple[str, dict[str, float | int | None]]]:
    def bad(path: str, what: str) -> ConfigError:
        return ConfigError(f"{where}: {path}: {what}")

    if not isinstance(data, dict):
        raise bad("(top level)", f"expected an object with a 'subsets' object, got {type(data).__name__}")
    unknown_top = set(data) - {"subsets", "notes"}
    if unknown_top:
        raise bad("(top level)", f"unknown key(s) {sorted(unknown_top)}; expected 'subsets' (and 'notes')")
    subsets = data.get("subsets", {})
    if not isinstance(subsets, dict):
        raise bad("subsets", f"expected an object of subset name -> parameters, got {type(subsets).__name__}")
    entries: list[tuple[str, dict[str, float | int | None]]] = []
    for name, values in subsets.items():
        if not isinstance(values, dict):
            raise bad(f"subsets.{name}", f"expected an object of parameter -> number, got {values!r}")
        clean: dict[str, float | int | None] = {}
        for param, value in values.items():
            path = f"subsets.{name}.{param}"
            if param in COMPUTED_PARAMS:
                raise bad(path, "is computed by the gate and cannot be overridden")
            if param not in DEFAULT_PARAMS:
                raise bad(path, f"unknown parameter; overridable: {', '.join(OVERRIDABLE)}")
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            ):
                raise bad(path, f"expected a number or null (no limit), got {value!r}")
            if value is not None and value < 0:
                raise bad(path, f"must be >= 0, got {value!r}")
            if param == "max_reject_rate" and value is not None and value > 1:
                raise bad(path, f"is a share of rows between 0 and 1, got {value!r}")
            clean[param] = value
        entries.append((str(name), clean))
    return entries


def load_overrides(path: str | Path | None = None) -> GateOverrides:
    """The shipped ``expectations/overrides.json`` plus the user's file ``path`` (which wins)."""
    entries = _parse_overrides(json.loads(_suite_text("overrides")), "expectations/overrides.json")
    files = ["expectations/overrides.json"]
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--gate-overrides {path}: cannot read it ({exc.strerror or exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--gate-overrides {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
        entries += _parse_overrides(data, str(path))
        files.append(str(p))
    return GateOverrides(tuple(entries), tuple(files))


def gate_params(
    subset: str,
    *,
    max_pixels: int | None,
    min_pixels: int | None = None,
    seq_len: int | None = None,
    max_num_images: int | None = None,
    max_reject_rate: float | None = None,
    max_media_bytes: int | None = None,
    overrides: GateOverrides | None = None,
) -> dict[str, float | int | None]:
    """Effective parameters of ``subset``: defaults < run options and preset < overrides."""
    params = dict(DEFAULT_PARAMS)
    run = {
        "max_pixels": max_pixels,
        "min_pixels": min_pixels,
        "seq_len": seq_len,
        "max_num_images": max_num_images,
        "max_reject_rate": max_reject_rate,
        "max_media_bytes": max_media_bytes,
    }
    params.update({k: v for k, v in run.items() if v is not None})
    if overrides is not None:
        params.update(overrides.for_subset(subset))
    return params


def _gx_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as Great Expectations needs them: numbers only (None becomes 'no limit')."""
    return {k: (_NONE_AS.get(k, UNBOUNDED) if v is None else v) for k, v in params.items()}


# --------------------------------------------------------------------------------------------------------
# Great Expectations


@lru_cache(maxsize=1)
def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    # Progress bars would flood CI logs and Prefect task logs.
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.data_sources.add_pandas("vlmforge")
    return ctx


def _validate(suite_name: str, spec: Mapping[str, Any], frame: pd.DataFrame, params: dict[str, Any]) -> Any:
    import great_expectations as gx

    source = _context().data_sources.get("vlmforge")
    asset_name = f"{suite_name}_profile"
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        batch_def = asset.get_batch_definition("whole")
    except KeyError:
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
    expectations = []
    for i, exp in enumerate(spec["expectations"]):
        exp = dict(exp)
        exp["meta"] = dict(exp.get("meta") or {}) | {"vlmforge_index": i}
        expectations.append(exp)
    suite = gx.ExpectationSuite(
        name=suite_name, expectations=expectations, meta={"version": spec.get("version")}
    )
    batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
    return batch.validate(suite, expectation_parameters=params, result_format={"result_format": "SUMMARY"})


class _Fmt(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _title(template: str, values: Mapping[str, Any]) -> str:
    shown = {k: ("no limit" if v is None else v) for k, v in values.items()}
    try:
        return template.format_map(_Fmt(shown))
    except (ValueError, TypeError, KeyError, IndexError):
        return template


def _short(value: Any, width: int = 80) -> str:
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
    return _short(value, 60)


def _detail(result: Any, found: str | None = None) -> str:
    res = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        return f"could not be checked: {_short(result.exception_info.get('exception_message'), 200)}"
    unexpected = res.get("partial_unexpected_list")
    if unexpected:
        return "found " + ", ".join(_found(found, v) for v in unexpected[:5])
    if "observed_value" in res:
        return f"observed {res.get('observed_value')}"
    return "failed"


def _examples(con: duckdb.DuckDBPyConnection | None, sql: str | None, params: Mapping[str, Any]) -> str:
    if con is None or not sql:
        return ""
    names = set(re.findall(r"\$([A-Za-z_]\w*)", sql))
    if any(params.get(n) is None for n in names):
        return ""
    try:
        rel = con.execute(f"SELECT * FROM ({sql}) LIMIT {EXAMPLES}", {n: params[n] for n in names})
        cols = [d[0] for d in rel.description or []]
        rows = rel.fetchall()
    except Exception as exc:  # noqa: BLE001 - examples are a courtesy; the failure itself stands
        return f" (examples unavailable: {_short(exc, 120)})"
    if not rows:
        return ""
    shown = "; ".join(
        " ".join(f"{c}={_short(_plain(v), 60)}" for c, v in zip(cols, row, strict=True)) for row in rows
    )
    return f"; e.g. {shown}"


def _run_suite(
    result: GateResult,
    suite_name: str,
    frame: pd.DataFrame,
    params: dict[str, Any],
    con: duckdb.DuckDBPyConnection | None,
) -> None:
    spec = load_suite(suite_name)
    validation = _validate(suite_name, spec, frame, _gx_params(params))
    if con is not None:
        con.register("profile", frame)  # the examples of a failed expectation may point at profile rows
    result.results[suite_name] = validation.to_json_dict()
    passed = True
    row0 = frame.iloc[0].to_dict() if len(frame) == 1 else {}
    for r in validation.results:
        if r.success:
            continue
        passed = False
        meta = r.expectation_config.meta or {}
        exp_spec = spec["expectations"][meta.get("vlmforge_index", 0)]
        exp_meta = exp_spec.get("meta") or {}
        title = _title(exp_meta.get("title") or r.expectation_config.type, params | row0)
        examples = _examples(con, exp_meta.get("examples"), params)
        if (
            "found" in exp_meta
            and exp_meta["found"] is None
            and not (r.exception_info or {}).get("raised_exception")
        ):
            detail = ""  # the title says it all (drift)
        else:
            detail = ": " + _detail(r, exp_meta.get("found"))
        result.failures.append(f"{suite_name}: {title}{detail}{examples}")
    result.suites[suite_name] = passed
    result.passed = result.passed and passed


# --------------------------------------------------------------------------------------------------------
# DuckDB profiles

SAMPLES_PROFILE = """
WITH dup_lines AS (
    SELECT line FROM samples WHERE line IS NOT NULL GROUP BY line HAVING count(*) > 1
), dup_ids AS (
    SELECT status, sample_id FROM samples WHERE sample_id IS NOT NULL GROUP BY ALL HAVING count(*) > 1
), dup_keys AS (
    SELECT status, key FROM samples WHERE key IS NOT NULL GROUP BY ALL HAVING count(*) > 1
), ids AS (
    SELECT s.status, count(*) AS n FROM samples s
    SEMI JOIN dup_ids d ON d.status IS NOT DISTINCT FROM s.status AND d.sample_id = s.sample_id
    GROUP BY s.status
), keys AS (
    SELECT s.status, count(*) AS n FROM samples s
    SEMI JOIN dup_keys d ON d.status IS NOT DISTINCT FROM s.status AND d.key = s.key
    GROUP BY s.status
), base AS (
    SELECT status,
        count(*) AS rows,
        count(*) FILTER (line IS NULL) AS null_lines,
        count(*) FILTER (line IN (SELECT line FROM dup_lines)) AS duplicate_lines,
        count(*) FILTER (sample_id IS NULL) AS null_sample_ids,
        count(*) FILTER (key IS NULL) AS null_keys,
        count(*) FILTER (reason IS NULL) AS null_reasons,
        count(*) FILTER (total_tokens IS NULL OR text_tokens IS NULL OR visual_tokens IS NULL
                         OR total_tokens < 1 OR text_tokens < 1 OR visual_tokens < 0)
            AS nonpositive_token_counts,
        count(*) FILTER (text_tokens + visual_tokens IS DISTINCT FROM total_tokens) AS token_sum_mismatches,
        min(total_tokens) AS min_total_tokens,
        max(total_tokens) AS max_total_tokens,
        coalesce(sum(total_tokens), 0) AS token_sum,
        max(n_images) AS max_images
    FROM samples GROUP BY status
)
SELECT base.status, base.rows,
    base.rows / sum(base.rows) OVER () AS share,
    base.null_lines, base.duplicate_lines, base.null_sample_ids,
    coalesce(ids.n, 0) AS duplicate_sample_ids,
    base.null_keys,
    coalesce(keys.n, 0) AS duplicate_keys,
    base.null_reasons, base.nonpositive_token_counts, base.token_sum_mismatches,
    base.min_total_tokens, base.max_total_tokens, base.token_sum, base.max_images
FROM base
LEFT JOIN ids ON ids.status IS NOT DISTINCT FROM base.status
LEFT JOIN keys ON keys.status IS NOT DISTINCT FROM base.status
ORDER BY base.status NULLS LAST
"""

# Stored objects that rows describe differently (usually none: then the profile does not look them up).
MEDIA_CONFLICTS = """
SELECT out_sha256 FROM media WHERE status = 'ok' AND out_sha256 IS NOT NULL GROUP BY out_sha256
HAVING min(out_bytes) <> max(out_bytes) OR min(out_ext) <> max(out_ext)
    OR min(out_width) <> max(out_width) OR min(out_height) <> max(out_height)
"""

MEDIA_PROFILE = """
WITH owner AS (
    SELECT line, any_value(status) AS status FROM samples WHERE line IS NOT NULL GROUP BY line
), checked AS (  -- a kept original is stored under its upstream sha256: match that string once
    SELECT *, CASE WHEN out_sha256 = sha256 THEN sha_ok
                   ELSE coalesce(regexp_full_match(out_sha256, '[0-9a-f]{64}'), false) END AS out_sha_ok
    FROM (SELECT *, coalesce(regexp_full_match(sha256, '[0-9a-f]{64}'), false) AS sha_ok FROM media)
)
SELECT m.kind, m.status, owner.status AS sample_status,
    count(*) AS refs,
    count(*) FILTER (NOT m.sha_ok) AS bad_sha256,
    count(*) FILTER (NOT m.out_sha_ok) AS bad_out_sha256,
    {object_conflicts} AS object_conflicts,
    min(coalesce(CAST(m.out_width AS BIGINT) * m.out_height, 0)) AS min_out_pixels,
    max(CAST(m.out_width AS BIGINT) * m.out_height) AS max_out_pixels,
    min(coalesce(m.visual_tokens, 0)) * CAST($factor_squared AS BIGINT) AS min_resized_pixels,
    max(m.visual_tokens) * CAST($factor_squared AS BIGINT) AS max_resized_pixels,
    min(coalesce(m.out_bytes, 0)) AS min_out_bytes,
    max(m.out_bytes) AS max_out_bytes,
    count(*) FILTER (m.reason IS NULL) AS null_reasons
FROM checked m LEFT JOIN owner ON owner.line = m.line
GROUP BY ALL
ORDER BY ALL NULLS LAST
"""


@contextmanager
def _duckdb(sources: Mapping[str, Source]) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB with one view per source (Arrow tables zero-copy, Parquet parts in place)."""
    import duckdb

    from ..storage import is_local

    con = duckdb.connect()
    try:
        for name, source in sources.items():
            if isinstance(source, pa.Table):
                con.register(name, source)
            elif not source.paths:
                con.register(name, source.schema.empty_table())
            else:
                prefix = ""
                if not is_local(source.fs):
                    con.register_filesystem(source.fs)
                    protocol = source.fs.protocol
                    prefix = (protocol if isinstance(protocol, str) else protocol[0]) + "://"
                files = ", ".join("'" + (prefix + p).replace("'", "''") + "'" for p in source.paths)
                con.execute(
                    f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{files}], "
                    "hive_partitioning = false, union_by_name = true)"
                )
        yield con
    finally:
        con.close()


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | None = None) -> pd.DataFrame:
    names = set(re.findall(r"\$([A-Za-z_]\w*)", sql))
    frame: pd.DataFrame = con.execute(sql, {n: (params or {}).get(n) for n in names}).df()
    return frame


def samples_profile(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The ``samples`` profile of the subset whose manifest is the view ``samples`` of ``con``."""
    return _frame(con, SAMPLES_PROFILE)


def media_profile(con: duckdb.DuckDBPyConnection, factor_squared: int | None) -> pd.DataFrame:
    """The ``media`` profile (views ``media`` and ``samples``); resized pixels only with a factor."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE media_conflicts AS {MEDIA_CONFLICTS}")
    found = con.execute("SELECT count(*) FROM media_conflicts").fetchall()[0][0]
    conflicts = "count(*) FILTER (m.out_sha256 IN (SELECT out_sha256 FROM media_conflicts))" if found else "0"
    return _frame(
        con, MEDIA_PROFILE.replace("{object_conflicts}", conflicts), {"factor_squared": factor_squared}
    )


def drift_frame(*, rows: int, token_sum: int, rejected: int, baseline: Baseline | None) -> pd.DataFrame:
    """One row comparing this run's counts with ``baseline`` (all changes null without one)."""
    import pandas as pd

    rate = rejected / rows if rows else 0.0
    row: dict[str, Any] = {
        "rows": rows,
        "token_sum": token_sum,
        "reject_rate": rate,
        "previous_run": None,
        "previous_rows": None,
        "previous_token_sum": None,
        "previous_reject_rate": None,
        "rows_change": None,
        "token_change": None,
        "reject_rate_change": None,
    }
    if baseline is not None:

        def rel(now: int, before: int) -> float:
            return (now - before) / max(before, 1)

        row |= {
            "previous_run": baseline.run_id,
            "previous_rows": baseline.rows,
            "previous_token_sum": baseline.token_sum,
            "previous_reject_rate": baseline.reject_rate,
            "rows_change": rel(rows, baseline.rows),
            "token_change": rel(token_sum, baseline.token_sum),
            "reject_rate_change": rate - baseline.reject_rate,
        }
    for name in ("rows", "token", "reject_rate"):
        change = row[f"{name}_change"]
        row[f"{name}_moved"] = None if change is None else abs(change)
    frame = pd.DataFrame([row])
    for col in ("rows_moved", "token_moved", "reject_rate_moved"):
        frame[col] = frame[col].astype("float64")
    return frame


# --------------------------------------------------------------------------------------------------------
# The gate


def run_gate(
    subset: str,
    samples: Source,
    media: Source,
    *,
    rows: int,
    max_pixels: int | None,
    seq_len: int | None,
    max_num_images: int | None,
    max_reject_rate: float | None,
    max_media_bytes: int | None = None,
    min_pixels: int | None = None,
    token_factor: int | None = None,
    baseline: Baseline | None = None,
    overrides: GateOverrides | None = None,
    suites: Sequence[str] = GATE_SUITES,
) -> GateResult:
    """Validate one subset's samples and media manifests and its drift since ``baseline``.

    ``samples``/``media`` are Arrow tables or :class:`ManifestParts`. ``rows`` is the catalog's line
    count. ``token_factor`` (pixels per visual token side, Qwen family) enables the after-resize pixel
    checks. Parameters that are None mean no limit; ``overrides`` adjust them for this subset.
    ``suites`` picks some of ``samples``, ``media`` and ``drift`` (default: all three).
    """
    unknown = set(suites) - set(GATE_SUITES)
    if unknown:
        raise ConfigError(f"unknown gate suite(s) {sorted(unknown)}; the gate runs {', '.join(GATE_SUITES)}")
    t0 = time.perf_counter()
    params: dict[str, Any] = gate_params(
        subset,
        max_pixels=max_pixels,
        min_pixels=min_pixels,
        seq_len=seq_len,
        max_num_images=max_num_images,
        max_reject_rate=max_reject_rate,
        max_media_bytes=max_media_bytes,
        overrides=overrides,
    )
    params |= {"rows": rows, "factor_squared": token_factor**2 if token_factor else None}
    result = GateResult(subset=subset, passed=True, params=params, stage="gate")
    with _duckdb({"samples": samples, "media": media}) as con:
        sprof = samples_profile(con)
        if "samples" in suites:
            _run_suite(result, "samples", sprof, params, con)
        if "media" in suites:
            _run_suite(result, "media", media_profile(con, params["factor_squared"]), params, con)
    if "drift" in suites:
        ok = sprof[sprof["status"] == "ok"]
        drift = drift_frame(
            rows=int(sprof["rows"].sum()),
            token_sum=int(ok["token_sum"].sum()) if len(ok) else 0,
            rejected=int(sprof.loc[sprof["status"] == "rejected", "rows"].sum()),
            baseline=baseline,
        )
        _run_suite(result, "drift", drift, params, None)
    result.seconds = time.perf_counter() - t0
    return result


def gate_subset(
    cfg: RunConfig,
    entry: SubsetEntry,
    *,
    run_id: str | None = None,
    overrides: GateOverrides | None = None,
) -> GateResult:
    """The flow's gate for one subset: its manifests under ``cfg.out``, the run's options, the model
    preset, the gate overrides (``cfg.gate_overrides``) and the subset's last published run."""
    from ...schemas.presets import load_preset
    from ..manifests import OutputLayout
    from .results import last_published

    layout = OutputLayout(cfg.out)
    preset = load_preset(cfg.model, cfg.model_dir)
    if overrides is None:
        overrides = load_overrides(getattr(cfg, "gate_overrides", None))
    return run_gate(
        entry.subset,
        ManifestParts.of(layout, "samples", entry.subset),
        ManifestParts.of(layout, "media", entry.subset),
        rows=entry.rows,
        max_pixels=cfg.max_pixels or preset.max_pixels,
        min_pixels=cfg.min_pixels or preset.min_pixels,
        seq_len=cfg.seq_len,
        max_num_images=cfg.max_num_images,
        max_reject_rate=cfg.max_reject_rate,
        token_factor=preset.factor if preset.family == "qwen" else None,
        baseline=last_published(layout, entry.subset, exclude_run=run_id),
        overrides=overrides,
    )


# --------------------------------------------------------------------------------------------------------
# The shards suite

SHARDS_PROFILE = """
WITH ok_keys AS (
    SELECT key, any_value(split) AS split FROM ok_samples WHERE key IS NOT NULL GROUP BY key
), repeated AS (
    SELECT key FROM listing GROUP BY key HAVING count(*) > 1
), per_shard AS (
    SELECT l.shard,
        count(*) AS keys,
        count(*) FILTER (l.key IN (SELECT key FROM repeated)) AS repeated_keys,
        count(*) FILTER (o.key IS NULL) AS unexpected_keys,
        count(*) FILTER (o.key IS NOT NULL AND o.split IS DISTINCT FROM l.split) AS split_mismatches
    FROM listing l LEFT JOIN ok_keys o ON o.key = l.key
    GROUP BY l.shard
), filled AS (
    SELECT shard, count(*) AS n FROM ok_samples WHERE shard IS NOT NULL GROUP BY shard
)
SELECT m.shard, m.split, m.listed_samples,
    coalesce(p.keys, 0) AS keys,
    m.indexed_samples, m.listed_bytes, m.file_bytes, m.manifest_samples,
    CASE WHEN $published THEN coalesce(f.n, 0) END AS filled_samples,
    coalesce(p.repeated_keys, 0) AS repeated_keys,
    coalesce(p.unexpected_keys, 0) AS unexpected_keys,
    coalesce(p.split_mismatches, 0) AS split_mismatches
FROM shard_meta m
LEFT JOIN per_shard p ON p.shard = m.shard
LEFT JOIN filled f ON f.shard = m.shard
ORDER BY m.shard
"""

_SHARD_META = pa.schema(
    [
        ("shard", pa.string()),
        ("split", pa.string()),
        ("listed_samples", pa.int64()),
        ("indexed_samples", pa.int64()),
        ("listed_bytes", pa.int64()),
        ("file_bytes", pa.int64()),
        ("manifest_samples", pa.int64()),
    ]
)
_LISTING = pa.schema([("shard", pa.string()), ("split", pa.string()), ("key", pa.string())])


def _read_dataset(dataset: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The dataset's ``vlmforge-shards.json`` and energon's shard counts; ValueError saying what is wrong."""
    from ..publish.shards import MANIFEST_NAME

    try:
        listing = json.loads((dataset / MANIFEST_NAME).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{MANIFEST_NAME} is missing") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{MANIFEST_NAME} is unreadable ({_short(exc, 120)})") from None
    if not isinstance(listing, list) or not all(
        isinstance(e, dict)
        and isinstance(e.get("shard"), str)
        and isinstance(e.get("keys"), list)
        and all(isinstance(k, str) for k in e["keys"])
        for e in listing
    ):
        raise ValueError(f"{MANIFEST_NAME} is not a list of {{shard, split, samples, bytes, keys}} entries")
    try:
        info = json.loads((dataset / ".nv-meta" / ".info.json").read_text(encoding="utf-8"))
        counts = info.get("shard_counts", {}) if isinstance(info, dict) else {}
    except FileNotFoundError:
        raise ValueError(".nv-meta/.info.json is missing (megatron-energon prepare did not run)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f".nv-meta/.info.json is unreadable ({_short(exc, 120)})") from None
    return listing, counts if isinstance(counts, dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_shards(
    subset: str,
    samples: Source,
    dataset: Path,
    *,
    published: bool = False,
    shards: pa.Table | None = None,
) -> GateResult:
    """Validate the Energon dataset folder ``dataset`` (staged or published) against the samples manifest.

    With ``published`` the ``samples.shard`` column and ``shards`` (the shards manifest) are compared
    too; before the swap they still describe the previous version, so they are left out.
    """
    t0 = time.perf_counter()
    result = GateResult(subset=subset, passed=True, stage="shards")
    dataset = Path(dataset)
    try:
        listing, counts = _read_dataset(dataset)
    except ValueError as exc:
        result.passed, result.suites["shards"] = False, False
        result.failures.append(f"shards: the dataset at {dataset.name} cannot be checked: {exc}")
        result.seconds = time.perf_counter() - t0
        return result
    per_manifest: dict[str, int] = {}
    if published and shards is not None:
        for name, n in zip(shards["shard"].to_pylist(), shards["samples"].to_pylist(), strict=True):
            per_manifest[name] = per_manifest.get(name, 0) + int(n)
    meta_rows, key_rows = [], []
    for entry in listing:
        path = dataset / entry["shard"]
        size = path.stat().st_size if path.is_file() else None
        meta_rows.append(
            {
                "shard": entry["shard"],
                "split": entry.get("split") if isinstance(entry.get("split"), str) else None,
                "listed_samples": _int_or_none(entry.get("samples")),
                "indexed_samples": _int_or_none(counts.get(entry["shard"])),
                "listed_bytes": _int_or_none(entry.get("bytes")),
                "file_bytes": size,
                "manifest_samples": per_manifest.get(entry["shard"])
                if published and shards is not None
                else None,
            }
        )
        key_rows += [{"shard": entry["shard"], "split": entry.get("split"), "key": k} for k in entry["keys"]]
    ok_sql = "SELECT line, sample_id, key, split, shard FROM samples WHERE status = 'ok'"
    with _duckdb({"samples": samples}) as con:
        con.register("shard_meta", pa.Table.from_pylist(meta_rows, schema=_SHARD_META))
        con.register("listing", pa.Table.from_pylist(key_rows, schema=_LISTING))
        con.execute(f"CREATE VIEW ok_samples AS {ok_sql}")
        ok_samples = int(con.execute("SELECT count(*) FROM ok_samples").fetchall()[0][0])
        result.params = {"ok_samples": ok_samples}
        frame = _frame(con, SHARDS_PROFILE, {"published": published})
        for col in ("listed_samples", "indexed_samples", "listed_bytes", "file_bytes"):
            frame[col] = frame[col].astype("float64")  # nulls compare unequal instead of raising
        _run_suite(result, "shards", frame, result.params, con)
    result.seconds = time.perf_counter() - t0
    return result


def shards_check(layout: OutputLayout, subset: str, *, run_id: str) -> Callable[[Path], None]:
    """The check ``write_energon_dataset`` runs on the staged folder before the swap.

    It validates the staged dataset against the subset's samples manifest, records the result under
    ``OUT/quality/<run_id>/<subset>.shards.json`` and raises :class:`ShardsGateFailed` when it fails,
    so the previously published dataset stays in place.
    """

    def check(staged: Path) -> None:
        from .results import record_gate

        result = check_shards(subset, ManifestParts.of(layout, "samples", subset), staged)
        record_gate(layout, run_id, result)
        if not result.passed:
            raise ShardsGateFailed(f"{subset}: {result.summary()}")

    return check


def gate_summary(results: Sequence[GateResult]) -> str:
    """One line per failed subset (for logs and the CLI)."""
    return "\n".join(f"{r.subset}: {r.summary()}" for r in results if not r.passed)
