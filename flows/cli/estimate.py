"""``vlmforge catalog --estimate``: the options that say which run is being estimated, and the printing.
The work is :func:`~vlmforge.tasks.estimate.estimate_release`."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console

__all__ = ["print_estimate", "run_estimate"]

console = Console()


def run_estimate(
    *,
    release: str,
    out: str | None,
    options: dict[str, Any],
    probe_sample: int,
    decode_sample: int,
    seed: int,
    cores: int,
    bandwidth: str,
) -> Any:
    """The run's config from flat ``options``, estimated (with the comparison when ``out`` is set)."""
    from ...tasks.errors import ConfigError
    from ...tasks.estimate import EstimateOptions, estimate_config, estimate_release, parse_bandwidth

    try:
        rate = parse_bandwidth(bandwidth)
    except ValueError:
        raise ConfigError(
            f"--bandwidth {bandwidth!r}: expected e.g. 1Gbit, 200Mbit, 50MB (per second)"
        ) from None
    cfg = estimate_config(release, out, options)
    estimate = estimate_release(
        EstimateOptions(
            cfg=cfg,
            out=out,
            probe_sample=probe_sample,
            decode_sample=decode_sample,
            seed=seed,
            cores=cores,
            bandwidth=rate,
        )
    )
    return estimate


def print_estimate(release: str, estimate: Any, as_json: bool) -> None:
    from ...tasks.estimate import as_json as to_json
    from ...tasks.estimate import estimate_table, footnotes, versus_hours, versus_table

    versus = estimate.versus
    if as_json:
        typer.echo(json.dumps(to_json(estimate.rows, versus), indent=1))
        return
    console.print(estimate_table(estimate.rows, f"estimate of {release} ({estimate.estimate_id})"))
    for note in footnotes(estimate.rows):
        console.print(f"  {note}", highlight=False)
    if versus:
        console.print(versus_table(versus))
        hours = versus_hours(versus)
        if hours:
            console.print(f"  {hours}", highlight=False)
