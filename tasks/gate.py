"""Quality gate: run the Great Expectations suites of ``expectations/`` over one subset's manifests.

The suites are data (JSON, versioned with the code). This module adds the derived columns they refer to,
fills their ``$PARAMETER`` values from the run options and the catalog, and returns pass/fail plus the
failing expectations as readable lines; the flow decides what to publish.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import pyarrow as pa

# Great Expectations reads this at import time; the gate must never phone home.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

SUITES = ("samples", "media")
UNBOUNDED = 2**62


@dataclass
class GateResult:
    subset: str
    passed: bool
    failures: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)  # suite -> GX validation result (JSON)

    def summary(self) -> str:
        return "passed" if self.passed else "failed: " + "; ".join(self.failures)


def load_suite(name: str) -> dict[str, Any]:
    text = resources.files("vlmforge.expectations").joinpath(f"{name}.json").read_text()
    suite: dict[str, Any] = json.loads(text)
    return suite


@lru_cache(maxsize=1)
def _context() -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    # Progress bars would flood CI logs and Prefect task logs.
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    ctx.data_sources.add_pandas("vlmforge")
    return ctx


def _validate(suite_name: str, df: Any, params: dict[str, Any]) -> Any:
    import great_expectations as gx

    ctx = _context()
    source = ctx.data_sources.get("vlmforge")
    asset_name = f"{suite_name}_frame"
    try:
        asset = source.get_asset(asset_name)
    except LookupError:
        asset = source.add_dataframe_asset(asset_name)
    try:
        batch_def = asset.get_batch_definition("whole")
    except KeyError:
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
    spec = load_suite(suite_name)
    suite = gx.ExpectationSuite(name=f"{suite_name}", expectations=spec["expectations"])
    batch = batch_def.get_batch(batch_parameters={"dataframe": df})
    return batch.validate(suite, expectation_parameters=params)


def _describe(result: Any) -> str:
    cfg = result.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k not in ("batch_id", "condition_parser")}
    res = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        detail = f"error: {result.exception_info.get('exception_message')}"
    elif "unexpected_count" in res:
        sample = res.get("partial_unexpected_list", [])[:5]
        detail = f"{res.get('unexpected_count')} unexpected, e.g. {sample}"
    else:
        detail = f"observed {res.get('observed_value')}"
    column = kwargs.pop("column", None)
    where = f" [{column}]" if column else ""
    return f"{cfg.type}{where} {kwargs}: {detail}"


def run_gate(
    subset: str,
    samples: pa.Table,
    media: pa.Table,
    *,
    rows: int,
    max_pixels: int,
    seq_len: int | None,
    max_num_images: int | None,
    max_reject_rate: float,
    max_media_bytes: int = 4 * 1024**3,
) -> GateResult:
    """Validate one subset's samples and media manifests against their suites."""
    sdf = samples.to_pandas()
    sdf["is_rejected"] = (sdf["status"] == "rejected").astype(float)
    sdf["tokens_add_up"] = (sdf["text_tokens"] + sdf["visual_tokens"]) == sdf["total_tokens"]
    mdf = media.to_pandas()
    mdf["out_pixels"] = mdf["out_width"].astype("float64") * mdf["out_height"].astype("float64")
    status_by_line = dict(zip(sdf["line"], sdf["status"], strict=True))
    mdf["sample_status"] = mdf["line"].map(status_by_line)
    params = {
        "rows": rows,
        "seq_len": seq_len if seq_len is not None else UNBOUNDED,
        "max_num_images": max_num_images if max_num_images is not None else UNBOUNDED,
        "max_reject_rate": max_reject_rate,
        "max_pixels": max_pixels,
        "max_media_bytes": max_media_bytes,
    }
    result = GateResult(subset=subset, passed=True)
    for name, df in (("samples", sdf), ("media", mdf)):
        validation = _validate(name, df, params)
        result.results[name] = validation.to_json_dict()
        for r in validation.results:
            if not r.success:
                result.passed = False
                result.failures.append(f"{name}: {_describe(r)}")
    return result
