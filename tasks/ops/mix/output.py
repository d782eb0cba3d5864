"""A planned mix as files (``OUT/energon/<name>.yaml`` for Energon, ``<name>.mix.json`` for scripts) and as
a table for people."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ...manifests import OutputLayout
from ...publish import ensure_dataset_config
from ...storage import atomic_write_bytes, is_local
from .plan import DEFAULT_MAX_OPEN_FILES, By, MixPlan, plan_mix

__all__ = ["format_mix", "write_mix"]


def _yaml_text(plan: MixPlan, configs: dict[str, str | None]) -> str:
    """The MetadatasetV2 text of ``plan``; ``configs``: the ``dataset_config`` of each subset (None: the
    dataset's ``dataset.yaml``)."""
    train: list[dict[str, Any]] = []
    for entry in plan.entries:
        leaf: dict[str, Any] = {
            "weight": entry.blend_weight,
            "path": f"./{entry.subset}",
            "subflavors": {"source": entry.subset},
        }
        config = configs[entry.subset]
        if config:
            leaf["dataset_config"] = config
        if entry.used_samples < entry.samples:
            leaf["subset"] = {"range": [0, entry.used_samples]}
        train.append(leaf)
    splits: dict[str, Any] = {"train": {"blend": train}}
    val = [{"path": f"./{e.subset}", "subflavors": {"source": e.subset}} for e in plan.entries if e.has_val]
    if val:
        splits["val"] = {"blend": val}
    doc = {"__module__": "megatron.energon", "__class__": "MetadatasetV2", "splits": splits}
    header = [
        f"# vlmforge mix {plan.name!r}: by {plan.by}"
        + (f", max {plan.max_tokens} tokens" if plan.max_tokens else "")
        + f"; <= {plan.open_files_per_worker} open files per loader worker"
        + f" (parallel_shard_iters {plan.entries[0].parallel_shard_iters})",
        "# subset: expected token share / sample share (see the .mix.json next to this file)",
    ]
    header += [f"#   {e.subset}: {e.token_share:.4f} / {e.sample_share:.4f}" for e in plan.entries]
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return "\n".join(header) + "\n" + body


def write_mix(
    out: str,
    *,
    name: str,
    weights: str | None = None,
    by: By = "tokens",
    license_allow: list[str] | None = None,
    max_tokens: int | None = None,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
) -> MixPlan:
    """Plan the mix and write ``OUT/energon/<name>.yaml`` and ``<name>.mix.json`` atomically through the
    output's file system (a folder or an object store such as ``s3://``), with any
    ``.nv-meta/dataset_psi<N>.yaml`` a leaf needs."""
    plan = plan_mix(
        out,
        name=name,
        weights=weights,
        by=by,
        license_allow=license_allow,
        max_tokens=max_tokens,
        max_open_files=max_open_files,
    )
    layout = OutputLayout(out)
    configs = {
        e.subset: ensure_dataset_config(f"{layout.energon}/{e.subset}", e.parallel_shard_iters, layout.fs)
        for e in plan.entries
    }
    target = f"{layout.energon}/{name}.yaml"
    plan.path = target if is_local(layout.fs) else layout.fs.unstrip_protocol(target)
    sidecar = json.dumps(plan.to_dict(), indent=1, sort_keys=True) + "\n"
    atomic_write_bytes(layout.fs, f"{layout.energon}/{name}.mix.json", sidecar.encode())
    atomic_write_bytes(layout.fs, target, _yaml_text(plan, configs).encode())
    return plan


def format_mix(plan: MixPlan) -> str:
    """The plan as a fixed-width table (subset, license, weight, samples, tokens, shares, epochs)."""
    head = ("subset", "license", "weight", "samples", "tokens", "blend", "sample %", "token %", "epochs")
    rows = [
        (
            e.subset,
            e.license,
            f"{e.weight:g}",
            f"{e.used_samples:,}" + (f"/{e.samples:,}" if e.used_samples < e.samples else ""),
            f"{e.used_tokens:,}",
            f"{e.blend_weight:.4f}",
            f"{100 * e.sample_share:.2f}",
            f"{100 * e.token_share:.2f}",
            f"{e.epochs:.2f}" if e.epochs is not None else "-",
        )
        for e in plan.entries
    ]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            str(c).ljust(w) if i < 2 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"{len(plan.entries)} subsets, by {plan.by}"
        + (f", max {plan.max_tokens:,} tokens" if plan.max_tokens else "")
        + f"; parallel_shard_iters {plan.entries[0].parallel_shard_iters}, <= {plan.open_files_per_worker}"
        f" open files per loader worker (budget {plan.max_open_files})"
    )
    for subset, reason in plan.excluded:
        lines.append(f"excluded {subset}: {reason}")
    if plan.path:
        lines.append(f"wrote {plan.path}")
    return "\n".join(lines)
