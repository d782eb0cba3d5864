"""Operations flows: ``refresh_release``, ``mix_flow`` and ``validate_flow`` (deployed by prefect.yaml).

Like :mod:`vlmforge.flows.pipeline`, these only wire and report; the work is in ``vlmforge.tasks``. Each
publishes a Prefect markdown artifact a person reads in the UI (the refresh plan with its reasons, a mix's
shares, the validation result per dataset).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from ..schemas.config import StorageOptions
from ..schemas.records import SubsetEntry
from ..tasks.catalog import RefreshPlan, plan_release_refresh, refresh_config
from ..tasks.errors import OutputError
from ..tasks.manifests import OutputLayout
from ..tasks.ops import MixPlan
from ..tasks.publish import published_subsets
from ..tasks.validate import ValidationReport
from .pipeline import run_release
from .runtime.executors import runner_for
from .summary import RunSummary

__all__ = [
    "RefreshResult",
    "mix_flow",
    "plan_release_refresh",
    "refresh_config",
    "refresh_release",
    "runner_for",
    "validate_flow",
]


def _md(text: object, max_chars: int = 400) -> str:
    """A value safe inside a markdown table cell."""
    return str(text).replace("|", "/").replace("\n", " ")[:max_chars]


# --- refresh -------------------------------------------------------------------------------------------


@dataclass
class RefreshResult:
    """What a refresh decided (with reasons) and the run of the changed subsets, if any."""

    release: str
    out: str
    plan: RefreshPlan
    unpublished: list[str] = field(default_factory=list)
    summary: RunSummary | None = None
    dry_run: bool = False

    @property
    def failed(self) -> list[str]:
        return self.summary.failed if self.summary is not None else []


def refresh_markdown(result: RefreshResult) -> str:
    verb = "would" if result.dry_run else "will"
    lines = [
        f"# vlmforge refresh of {result.out}",
        "",
        f"from `{result.release}`: {len(result.plan.rerun)} subsets {verb} rerun, "
        f"{len(result.plan.unpublish)} {verb} be unpublished, {len(result.plan.unchanged)} unchanged",
        "",
        "| subset | action | why |",
        "|---|---|---|",
    ]
    order = {"rerun": 0, "unpublish": 1, "unchanged": 2}
    for c in sorted(result.plan.changes, key=lambda c: (order.get(c.action, 3), c.subset)):
        lines.append(f"| {c.subset} | {c.action} | {_md('; '.join(c.reasons) or 'no upstream change')} |")
    if result.summary is not None:
        s = result.summary
        lines += ["", f"rerun: run `{s.run_id}`, published {len(s.subsets) - len(s.failed)}/{len(s.subsets)}"]
        if s.failed:
            lines.append(f"held back: {', '.join(s.failed)}")
    return "\n".join(lines) + "\n"


@task(name="catalog", task_run_name="catalog {release}", retries=2, retry_delay_seconds=10)
def catalog_task(
    release: str, storage_options: dict[str, Any] | None = None, recipes: list[str] | str | None = None
) -> list[SubsetEntry]:
    """Hashes, rows, license and sources of every subset (no media); each subset's recipe fingerprinted as
    a run finds it (the first of ``recipes``, then the shipped ones)."""
    from ..tasks.catalog import catalog_release

    folders = [recipes] if isinstance(recipes, str) else list(recipes or ())
    return catalog_release(release, storage_options=storage_options, recipe_dirs=folders)


@task(name="unpublish", task_run_name="unpublish {subset}")
def unpublish_task(out: str, subset: str) -> bool:
    from ..tasks.catalog import unpublish_subset

    return unpublish_subset(OutputLayout(out), subset)


@task(name="publish-metadataset", task_run_name="publish metadataset of {out}")
def publish_metadataset_task(out: str) -> str | None:
    from ..tasks.publish import publish_metadataset

    return publish_metadataset(OutputLayout(out))


@flow(name="vlmforge-refresh", flow_run_name="refresh {out} from {release}", log_prints=True)
def refresh_release(
    release: str,
    out: str,
    # Prefect stores and shows flow-run parameters: pass StorageOptions so credentials are masked there
    # (a deployment should rather take them from the worker's environment).
    storage_options: StorageOptions | dict[str, Any] | None = None,
    recipes: list[str] | str | None = None,
    license_allow: list[str] | None = None,
    retry_unpublished: bool = False,
    dry_run: bool = False,
    overrides: dict[str, Any] | None = None,
) -> RefreshResult:
    """Rerun only the subsets of ``release`` that changed since ``out``'s last run; unpublish removed ones.

    The reruns use the last run's options (``runs/<run>.json``), updated by ``overrides``; ``license_allow``
    (SPDX ids or globs) takes subsets under other licenses out. A Prefect artifact lists every decision.
    """
    from ..tasks.catalog import parse_license_allow

    logger = get_run_logger()
    allow = parse_license_allow(license_allow)
    if isinstance(storage_options, StorageOptions):
        storage_options = storage_options.options
    entries = catalog_task(release, storage_options, recipes)
    plan = plan_release_refresh(entries, out, allow, retry_unpublished=retry_unpublished)
    result = RefreshResult(release=release, out=out, plan=plan, dry_run=dry_run)
    for line in plan.lines():
        logger.info("%s", line)
    if not dry_run:
        for subset in plan.unpublish:
            if unpublish_task(out, subset):
                result.unpublished.append(subset)
        if plan.rerun:
            cfg = refresh_config(
                release,
                out,
                plan.rerun,
                storage_options=storage_options,
                license_allow=allow,
                overrides=overrides,
            )
            result.summary = run_release.with_options(task_runner=runner_for(cfg))(cfg)
        publish_metadataset_task(out)
    create_markdown_artifact(
        key="vlmforge-refresh",
        markdown=refresh_markdown(result),
        description=f"what the refresh of {out} decided, and why",
    )
    return result


# --- mix -----------------------------------------------------------------------------------------------


@task(name="write-mix", task_run_name="write mix {name} of {out}")
def write_mix_task(
    out: str,
    name: str,
    weights: str | None,
    by: str,
    license_allow: list[str] | None,
    max_tokens: int | None,
    max_open_files: int,
) -> MixPlan:
    from ..tasks.ops import write_mix

    return write_mix(
        out,
        name=name,
        weights=weights,
        by=by,  # type: ignore[arg-type]  # checked by plan_mix
        license_allow=license_allow,
        max_tokens=max_tokens,
        max_open_files=max_open_files,
    )


def mix_markdown(plan: MixPlan) -> str:
    lines = [
        f"# vlmforge mix `{plan.name}`",
        "",
        f"`{plan.path}`: {len(plan.entries)} subsets, weights by {plan.by}"
        + (f", max {plan.max_tokens:,} tokens" if plan.max_tokens else "")
        + f"; at most {plan.open_files_per_worker} open files per loader worker",
        "",
        "| subset | license | weight | samples | tokens | blend weight | sample % | token % | epochs |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for e in plan.entries:
        epochs = f"{e.epochs:.2f}" if e.epochs is not None else "-"
        lines.append(
            f"| {e.subset} | {e.license} | {e.weight:g} | {e.used_samples:,}/{e.samples:,}"
            f" | {e.used_tokens:,} | {e.blend_weight:.4f} | {100 * e.sample_share:.2f}"
            f" | {100 * e.token_share:.2f} | {epochs} |"
        )
    if plan.excluded:
        lines += ["", "Left out:", ""] + [f"- {s}: {_md(why)}" for s, why in plan.excluded]
    return "\n".join(lines) + "\n"


@flow(name="vlmforge-mix", flow_run_name="mix {name} of {out}", log_prints=True)
def mix_flow(
    out: str,
    name: str,
    weights: str | None = None,
    by: str = "tokens",
    license_allow: list[str] | None = None,
    max_tokens: str | None = None,
    max_open_files: int = 512,
) -> dict[str, Any]:
    """``vlmforge mix`` as a flow: write ``OUT/energon/<name>.yaml`` over the published subsets."""
    from ..tasks.ops import format_mix, parse_count

    allow = [item.strip() for raw in license_allow or [] for item in raw.split(",") if item.strip()]
    plan = write_mix_task(
        out,
        name,
        weights,
        by,
        allow or None,
        parse_count(max_tokens) if max_tokens is not None else None,
        max_open_files,
    )
    get_run_logger().info("%s", format_mix(plan))
    create_markdown_artifact(
        key="vlmforge-mix", markdown=mix_markdown(plan), description=f"shares of mix {name} over {out}"
    )
    result: dict[str, Any] = plan.to_dict()
    return result


# --- validate ------------------------------------------------------------------------------------------


@task(name="validate-subset", task_run_name="validate {subset} of {out}")
def validate_subset_task(
    out: str, subset: str, sample_limit: int | None, num_workers: int, checksums: bool | None
) -> ValidationReport:
    from ..tasks.validate import validate_subset

    return validate_subset(
        out, subset, sample_limit=sample_limit, num_workers=num_workers, checksums=checksums
    )


@task(name="validate-blends", task_run_name="validate blends of {out}")
def validate_blends_task(out: str) -> list[ValidationReport]:
    from ..tasks.publish import energon_view
    from ..tasks.validate import validate_blend

    reports = []
    with energon_view(OutputLayout(out)) as root:  # OUT/energon, or a local copy of a remote one's metadata
        for path in sorted(root.glob("*.yaml")):
            report = ValidationReport(path=path)
            for problem in validate_blend(path):
                report.add(problem)
            reports.append(report)
    return reports


def validate_markdown(out: str, reports: Sequence[ValidationReport]) -> str:
    failed = sum(not r.ok for r in reports)
    lines = [
        f"# vlmforge validate {out}",
        "",
        f"{len(reports) - failed} ok, {failed} failed",
        "",
        "| dataset | result | samples read / expected | problems |",
        "|---|---|---|---|",
    ]
    for r in reports:
        read = ", ".join(
            f"{split} {r.counts.get(split, 0)}/{n}" for split, n in sorted(r.expected_counts.items())
        )
        problems = "; ".join(r.problems[:5]) + (
            f" (+{len(r.problems) - 5} more)" if len(r.problems) > 5 else ""
        )
        lines.append(
            f"| {r.subset or r.path.name} | {'ok' if r.ok else 'FAILED'} | {read or '-'} | {_md(problems)} |"
        )
    return "\n".join(lines) + "\n"


@flow(name="vlmforge-validate", flow_run_name="validate {out}", log_prints=True)
def validate_flow(
    out: str,
    subsets: list[str] | None = None,
    sample: int | None = None,
    workers: int = 0,
    checksums: bool | None = None,
) -> dict[str, Any]:
    """``vlmforge validate`` as a flow: load each dataset back through megatron-energon and the cooker.

    The flow run fails (after publishing its artifact) when a dataset or blend does not match its manifests.
    """
    names = list(subsets or []) or published_subsets(out)
    if not names:
        raise OutputError(
            f"{out!r} has no published Energon dataset under energon/: run `vlmforge run` first"
        )
    reports = [validate_subset_task(out, name, sample, workers, checksums) for name in names]
    if not subsets:
        reports += validate_blends_task(out)
    create_markdown_artifact(
        key="vlmforge-validate",
        markdown=validate_markdown(out, reports),
        description=f"megatron-energon read-back of {out} against its manifests",
    )
    failed = [r.subset or r.path.name for r in reports if not r.ok]
    if failed:
        raise OutputError(f"validation failed for {', '.join(failed)} (see the vlmforge-validate artifact)")
    return {"out": out, "ok": [r.subset or r.path.name for r in reports], "failed": failed}
