"""``vlmforge catalog --estimate`` as a Prefect flow (a deployment can run it before a scheduled run): the
same estimate, its figures returned as JSON and published as a Markdown artifact (``vlmforge-estimate``)
a person reads in the UI, with the estimate-vs-actual table once a run has used OUT."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from ..schemas.config import StorageOptions
from ..schemas.trainers import TRAINERS
from ..tasks.estimate import DEFAULT_BANDWIDTH_TEXT, DEFAULT_DECODE_SAMPLE, DEFAULT_PROBE_SAMPLE

__all__ = ["estimate_flow"]


@flow(name="vlmforge-estimate", flow_run_name="estimate {release}")
def estimate_flow(
    release: str,
    out: str | None = None,
    subsets: list[str] | None = None,
    recipes: list[str] | None = None,
    media_roots: list[str] | None = None,
    storage_options: StorageOptions | None = None,
    trainer: str | None = None,
    knobs: dict[str, Any] | None = None,
    cores: int = 0,
    bandwidth: str = DEFAULT_BANDWIDTH_TEXT,
    probe_sample: int = DEFAULT_PROBE_SAMPLE,
    decode_sample: int = DEFAULT_DECODE_SAMPLE,
    seed: int = 0,
) -> dict[str, Any]:
    """Estimate ``release`` for a run with ``trainer``'s knobs (``knobs``, by their flat option names such as
    ``max_pixels``, win over the trainer's)."""
    from ..tasks.estimate import (
        EstimateOptions,
        as_json,
        as_markdown,
        estimate_config,
        estimate_release,
        parse_bandwidth,
    )

    run_options = dict(TRAINERS[trainer]) if trainer else {}
    run_options |= dict(knobs or {}) | {
        "subsets": tuple(subsets or ()),
        "catalogs": tuple(recipes or ()),
        "media_roots": tuple(media_roots or ()),
        "storage_options": storage_options.options if storage_options else {},
    }
    cfg = estimate_config(release, out, run_options)
    estimate = estimate_release(
        EstimateOptions(
            cfg=cfg,
            out=out,
            probe_sample=probe_sample,
            decode_sample=decode_sample,
            seed=seed,
            cores=cores,
            bandwidth=parse_bandwidth(bandwidth),
        )
    )
    create_markdown_artifact(
        key="vlmforge-estimate",
        markdown=as_markdown(estimate.rows, estimate.versus),
        description=f"what a run of {release} will fetch, store and take",
    )
    return as_json(estimate.rows, estimate.versus)
