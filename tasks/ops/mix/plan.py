"""Compute a mix: which subsets, how much of each, their blend weights and shares, and the open-file budget
(see :mod:`vlmforge.tasks.ops.mix` for the rules). Nothing is written here."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ...errors import ConfigError, OutputError
from ...manifests import OutputLayout
from ...publish import dataset_splits, published_subsets, read_manifest
from .weights import license_allowed, parse_weights, resolve_weights

__all__ = ["DEFAULT_MAX_OPEN_FILES", "By", "MixEntry", "MixPlan", "plan_mix"]

By = Literal["tokens", "samples"]
DEFAULT_MAX_OPEN_FILES = 512
_PSI_CHOICES = (16, 8, 4, 2, 1)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class MixEntry:
    subset: str
    license: str
    #: the user's weight (a token share with ``by="tokens"``, a sample share with ``by="samples"``)
    weight: float
    #: published train samples and their tokens
    samples: int
    tokens: int
    #: what the mix uses (a prefix with ``max_tokens``, else everything)
    used_samples: int
    used_tokens: int
    #: written to the yaml (normalised to sum 1 over the train blend)
    blend_weight: float
    #: expected shares of drawn samples and of drawn tokens
    sample_share: float
    token_share: float
    #: with ``max_tokens``: tokens wanted from this subset and how often its used samples are seen
    target_tokens: int | None
    epochs: float | None
    #: shards of the train split in use, and the ``parallel_shard_iters`` of the leaf
    shards: int
    parallel_shard_iters: int
    has_val: bool


@dataclass
class MixPlan:
    name: str
    by: By
    entries: list[MixEntry]
    #: (subset, reason) of published subsets left out
    excluded: list[tuple[str, str]] = field(default_factory=list)
    max_tokens: int | None = None
    max_open_files: int = DEFAULT_MAX_OPEN_FILES
    #: upper bound of tar + index handles one loader worker keeps open for the train blend
    open_files_per_worker: int = 0
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["excluded"] = [{"subset": s, "reason": r} for s, r in self.excluded]
        return doc


@dataclass
class _Subset:
    name: str
    license: str
    tokens_in_order: list[int]  # train samples in write order
    train_shards: list[tuple[str, int]]  # (shard, samples) in order
    has_val: bool


def _load_subsets(layout: OutputLayout, names: list[str]) -> dict[str, _Subset]:
    """Train tokens in write order (from the ``samples`` manifest) checked against the published dataset
    (its listing and ``split.yaml``, read through the output's file system)."""
    from ..query import connect

    con = connect(layout.out)
    try:
        licenses = dict(
            con.execute("SELECT subset, any_value(license) FROM subsets GROUP BY subset").fetchall()
        )
        rows = con.execute(
            "SELECT subset, total_tokens FROM samples WHERE status = 'ok' AND split = 'train' "
            "AND shard IS NOT NULL AND list_contains(?, subset) ORDER BY subset, line",
            [names],
        ).fetchall()
    finally:
        con.close()
    tokens: dict[str, list[int]] = {name: [] for name in names}
    for subset, total in rows:
        tokens[subset].append(int(total or 0))
    out: dict[str, _Subset] = {}
    for name in names:
        dataset = f"{layout.energon}/{name}"
        listing = read_manifest(dataset, layout.fs)
        train = [(e["shard"], int(e["samples"])) for e in listing if e["split"] == "train"]
        published = sum(n for _s, n in train)
        if published != len(tokens[name]):
            raise OutputError(
                f"subset {name!r}: the samples manifest has {len(tokens[name])} published train samples, "
                f"energon/{name} has {published}; the manifests and the dataset disagree "
                "(rerun `vlmforge run`)"
            )
        out[name] = _Subset(
            name=name,
            license=str(licenses.get(name) or "unknown"),
            tokens_in_order=tokens[name],
            train_shards=train,
            has_val="val" in dataset_splits(dataset, layout.fs),
        )
    return out


def _shards_used(shards: list[tuple[str, int]], samples: int) -> int:
    used, seen = 0, 0
    for _name, count in shards:
        if seen >= samples:
            break
        used += 1
        seen += count
    return used


def _choose_psi(shard_counts: list[int], max_open_files: int) -> tuple[int, int]:
    for psi in _PSI_CHOICES:
        handles = sum(2 * min(psi, n) for n in shard_counts)
        if handles <= max_open_files:
            return psi, handles
    need = sum(2 * min(1, n) for n in shard_counts)
    raise ConfigError(
        f"a loader worker needs at least {need} open files for these {len(shard_counts)} subsets "
        f"(a tar and its index per subset); raise --max-open-files to >= {need} (and `ulimit -n` with it) "
        "or mix fewer subsets"
    )


def plan_mix(
    out: str,
    *,
    name: str,
    weights: str | None = None,
    by: By = "tokens",
    license_allow: list[str] | None = None,
    max_tokens: int | None = None,
    max_open_files: int = DEFAULT_MAX_OPEN_FILES,
) -> MixPlan:
    """Compute a mix (see the module docstring) without writing anything."""
    _check_options(name, by, max_tokens)
    published = published_subsets(out)
    if not published:
        raise OutputError(
            f"{out!r} has no published Energon dataset under energon/: run `vlmforge run` first"
        )
    chosen = resolve_weights(parse_weights(weights), published) if weights else dict.fromkeys(published, 1.0)
    if not chosen:
        raise ConfigError("every matched subset has weight 0: nothing to mix")
    data = _load_subsets(OutputLayout(out), sorted(chosen))
    plan = MixPlan(name=name, by=by, entries=[], max_tokens=max_tokens, max_open_files=max_open_files)
    kept = _keep(plan, published, chosen, data, license_allow)
    used, targets = _budget(kept, data, by, max_tokens)
    plan.entries, plan.open_files_per_worker = _entries(kept, data, used, targets, by, max_open_files)
    return plan


def _check_options(name: str, by: str, max_tokens: int | None) -> None:
    if not _NAME_RE.match(name) or name == "metadataset":
        raise ConfigError(
            f"invalid mix name {name!r}: letters, digits, '_' and '-' (not 'metadataset', which `run` writes)"
        )
    if by not in ("tokens", "samples"):
        raise ConfigError(f"--by must be 'tokens' or 'samples', got {by!r}")
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError("--max-tokens must be positive")


def _keep(
    plan: MixPlan,
    published: list[str],
    chosen: dict[str, float],
    data: dict[str, _Subset],
    license_allow: list[str] | None,
) -> dict[str, float]:
    """The chosen subsets that stay in the mix (subset -> weight); the others go to ``plan.excluded``."""
    plan.excluded = [(s, "not matched by --weights") for s in published if s not in chosen]
    kept: dict[str, float] = {}
    for subset, weight in sorted(chosen.items()):
        info = data[subset]
        if license_allow and not license_allowed(info.license, license_allow):
            plan.excluded.append((subset, f"license {info.license} not in --license-allow"))
        elif not info.tokens_in_order:
            plan.excluded.append((subset, "no train samples"))
        else:
            kept[subset] = weight
    plan.excluded.sort()
    if not kept:
        raise ConfigError(
            "no subset left to mix: " + "; ".join(f"{s}: {r}" for s, r in plan.excluded if s in chosen)
        )
    return kept


def _budget(
    kept: dict[str, float], data: dict[str, _Subset], by: By, max_tokens: int | None
) -> tuple[dict[str, int], dict[str, int | None]]:
    """(samples used, target tokens) per subset: everything, or with ``max_tokens`` the prefix of its
    samples whose tokens fit its share of the budget."""
    used = {s: len(data[s].tokens_in_order) for s in kept}
    targets: dict[str, int | None] = dict.fromkeys(kept)
    if max_tokens is None:
        return used, targets
    for subset, share in _token_shares(kept, data, by).items():
        budget = max(1, round(share * max_tokens))
        targets[subset] = budget
        used[subset] = _prefix_within(data[subset].tokens_in_order, budget)
    return used, targets


def _token_shares(kept: dict[str, float], data: dict[str, _Subset], by: By) -> dict[str, float]:
    if by == "tokens":
        total_weight = sum(kept.values())
        return {s: w / total_weight for s, w in kept.items()}
    # sample shares -> token shares with the full means
    means = {s: sum(data[s].tokens_in_order) / len(data[s].tokens_in_order) for s in kept}
    norm = sum(kept[s] * means[s] for s in kept)
    return {s: kept[s] * means[s] / norm for s in kept}


def _prefix_within(tokens_in_order: list[int], budget: int) -> int:
    """How many leading samples fit ``budget`` tokens (at least one)."""
    running, count = 0, 0
    for tokens in tokens_in_order:
        if count and running + tokens > budget:
            break
        running += tokens
        count += 1
    return count


def _entries(
    kept: dict[str, float],
    data: dict[str, _Subset],
    used: dict[str, int],
    targets: dict[str, int | None],
    by: By,
    max_open_files: int,
) -> tuple[list[MixEntry], int]:
    """The mix's entries (blend weights normalised, expected shares, epochs, open files) and the open
    files one loader worker needs."""
    used_tokens = {s: sum(data[s].tokens_in_order[: used[s]]) for s in kept}
    means_used = {s: used_tokens[s] / used[s] for s in kept}
    raw = {s: (kept[s] / means_used[s] if by == "tokens" and means_used[s] > 0 else kept[s]) for s in kept}
    raw_sum = sum(raw.values())
    blend = {s: float(f"{raw[s] / raw_sum:.9g}") for s in kept}
    token_mass = sum(blend[s] * means_used[s] for s in kept)
    shard_counts = {s: _shards_used(data[s].train_shards, used[s]) for s in kept}
    psi, handles = _choose_psi(list(shard_counts.values()), max_open_files)
    entries = []
    for subset in sorted(kept):
        target = targets[subset]
        entries.append(
            MixEntry(
                subset=subset,
                license=data[subset].license,
                weight=kept[subset],
                samples=len(data[subset].tokens_in_order),
                tokens=sum(data[subset].tokens_in_order),
                used_samples=used[subset],
                used_tokens=used_tokens[subset],
                blend_weight=blend[subset],
                sample_share=blend[subset] / sum(blend.values()),
                token_share=blend[subset] * means_used[subset] / token_mass if token_mass else 0.0,
                target_tokens=target,
                epochs=(target / used_tokens[subset]) if target is not None and used_tokens[subset] else None,
                shards=shard_counts[subset],
                parallel_shard_iters=psi,
                has_val=data[subset].has_val,
            )
        )
    return entries, handles
