"""Training mixes: MetadatasetV2 blends over a run's published subsets, weighted by tokens or samples.

``vlmforge mix OUT --name ocr_heavy --weights "docvqa=2,chartqa_*=1" --by tokens`` writes
``OUT/energon/ocr_heavy.yaml`` (next to ``metadataset.yaml``, so leaves are ``./<subset>``) and
``OUT/energon/ocr_heavy.mix.json`` (the plan below, for scripts).

* **Weights** are ``pattern=weight`` items; a pattern is a subset name or an ``fnmatch`` glob. An exact
  name wins over globs, otherwise the first matching glob; weight 0 leaves a subset out; subsets no
  pattern matches are not in the mix; a pattern that matches no published subset is an error (typos).
  Without ``--weights`` every published subset gets weight 1.
* ``--by tokens`` (default): weights are target shares of *tokens*. Energon's blend draws a dataset per
  sample with probability proportional to its blend weight, so the blend weight of subset *i* is
  ``w_i / mean_tokens_i`` (normalised), where the mean is over the train samples the mix uses, read from
  the ``samples`` manifest (``total_tokens`` of ok, published samples). ``--by samples``: weights are
  target shares of samples (blend weight = ``w_i``). Both shares are printed.
* ``--license-allow`` keeps only subsets whose license (``subsets`` manifest) matches one of the given ids
  or globs (case-insensitive); the others are listed as excluded.
* ``--max-tokens N``: the mix is meant to be trained for N tokens. Subset *i* then contributes
  ``share_i * N`` tokens: when it has more, the leaf gets ``subset: {range: [0, k]}`` with the first *k*
  samples (write order = JSONL line order) whose tokens fit; when it has fewer it is repeated, shown as
  ``epochs`` > 1.
* **Open files**: a loader worker keeps up to ``parallel_shard_iters`` (Energon default 16) shards of every
  leaf open, each with its ``.tar.idx`` (energon-format.md §8, issue #81): 76 subsets x 16 x 2 > 2400
  handles, beyond a common ``ulimit -n`` of 1024. The mix picks the largest ``parallel_shard_iters`` in
  1, 2, 4, 8, 16 for which ``sum(2 * min(psi, shards_i))`` stays within ``max_open_files`` (default 512)
  and points each leaf at ``.nv-meta/dataset_psi<N>.yaml`` through ``dataset_config``.
* ``val`` concatenates the val splits of the mixed subsets that have one (Energon ignores weights there).

Energon issue #266 (a leaf reachable twice yields the same order twice) cannot happen: every subset
appears once.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError, OutputError
from ..manifests import OutputLayout
from ..publish.shards import (
    MANIFEST_NAME,
    dataset_splits,
    ensure_dataset_config,
    read_manifest,
)

__all__ = [
    "DEFAULT_MAX_OPEN_FILES",
    "MixEntry",
    "MixPlan",
    "format_mix",
    "parse_count",
    "parse_weights",
    "plan_mix",
    "resolve_weights",
    "write_mix",
]

By = Literal["tokens", "samples"]
DEFAULT_MAX_OPEN_FILES = 512
_PSI_CHOICES = (16, 8, 4, 2, 1)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([kmbgt]?)\s*$", re.IGNORECASE)
_COUNT_POWER = {"": 0, "k": 3, "m": 6, "b": 9, "g": 9, "t": 12}


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


def parse_count(text: str | int) -> int:
    """A token count such as ``2B``, ``500M``, ``1.5k``, ``3e9`` or ``1000000`` (B/G = 1e9, T = 1e12)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        match = _COUNT_RE.match(str(text))
        if not match:
            raise ConfigError(f"invalid count {text!r}: use e.g. 2B, 500M, 1.5k, 3e9 or 1000000")
        value = float(match.group(1)) * 10 ** (
            int(match.group(2) or 0) + _COUNT_POWER[match.group(3).lower()]
        )
    if value < 1:
        raise ConfigError(f"invalid count {text!r}: must be at least 1")
    return int(value)


def parse_weights(text: str) -> list[tuple[str, float]]:
    """``"docvqa=2,chartqa_*=1"`` -> ``[("docvqa", 2.0), ("chartqa_*", 1.0)]`` (a bare name: weight 1)."""
    items: list[tuple[str, float]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        pattern, eq, value = item.partition("=")
        pattern = pattern.strip()
        try:
            weight = float(value) if eq else 1.0
        except ValueError:
            raise ConfigError(f"--weights: {item!r}: the weight after '=' must be a number") from None
        if not pattern or not math.isfinite(weight) or weight < 0:
            raise ConfigError(f"--weights: {item!r}: expected PATTERN=WEIGHT with a weight >= 0")
        if any(p == pattern for p, _w in items):
            raise ConfigError(f"--weights: {pattern!r} is given twice")
        items.append((pattern, weight))
    if not items:
        raise ConfigError("--weights is empty: give PATTERN=WEIGHT items separated by commas")
    return items


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def resolve_weights(patterns: list[tuple[str, float]], subsets: list[str]) -> dict[str, float]:
    """Subset -> weight (> 0 only): exact names first, then the first matching glob."""
    unmatched = [p for p, _w in patterns if not any(fnmatch.fnmatchcase(s, p) for s in subsets)]
    if unmatched:
        raise ConfigError(
            f"--weights: {', '.join(repr(p) for p in unmatched)} matches no published subset "
            f"(published: {', '.join(subsets) or 'none'})"
        )
    exact = {p: w for p, w in patterns if not _is_glob(p)}
    globs = [(p, w) for p, w in patterns if _is_glob(p)]
    out: dict[str, float] = {}
    for subset in subsets:
        weight = exact.get(subset)
        if weight is None:
            weight = next((w for p, w in globs if fnmatch.fnmatchcase(subset, p)), None)
        if weight:
            out[subset] = weight
    return out


def _license_allowed(license_id: str, allow: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(license_id.lower(), pattern.lower()) for pattern in allow)


@dataclass
class _Subset:
    name: str
    license: str
    tokens_in_order: list[int]  # train samples in write order
    train_shards: list[tuple[str, int]]  # (shard, samples) in order
    has_val: bool


def _published(layout: OutputLayout) -> list[str]:
    root = Path(layout.energon)
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST_NAME).is_file()
    )


def _load_subsets(layout: OutputLayout, names: list[str]) -> dict[str, _Subset]:
    """Train tokens in write order (from the ``samples`` manifest) checked against the published dataset."""
    from .query import connect

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
        dataset = Path(layout.energon) / name
        listing = read_manifest(dataset)
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
            has_val="val" in dataset_splits(dataset),
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
    if not _NAME_RE.match(name) or name == "metadataset":
        raise ConfigError(
            f"invalid mix name {name!r}: letters, digits, '_' and '-' (not 'metadataset', which `run` writes)"
        )
    if by not in ("tokens", "samples"):
        raise ConfigError(f"--by must be 'tokens' or 'samples', got {by!r}")
    if max_tokens is not None and max_tokens < 1:
        raise ConfigError("--max-tokens must be positive")
    layout = OutputLayout(out)
    published = _published(layout)
    if not published:
        raise OutputError(
            f"{out!r} has no published Energon dataset under energon/: run `vlmforge run` first"
        )
    chosen = resolve_weights(parse_weights(weights), published) if weights else dict.fromkeys(published, 1.0)
    if not chosen:
        raise ConfigError("every matched subset has weight 0: nothing to mix")
    data = _load_subsets(layout, sorted(chosen))
    plan = MixPlan(name=name, by=by, entries=[], max_tokens=max_tokens, max_open_files=max_open_files)
    plan.excluded = [(s, "not matched by --weights") for s in published if s not in chosen]
    kept: dict[str, float] = {}
    for subset, weight in sorted(chosen.items()):
        info = data[subset]
        if license_allow and not _license_allowed(info.license, license_allow):
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

    total_weight = sum(kept.values())
    used = {s: len(data[s].tokens_in_order) for s in kept}
    targets: dict[str, int | None] = dict.fromkeys(kept)
    if max_tokens is not None:
        if by == "tokens":
            shares = {s: w / total_weight for s, w in kept.items()}
        else:  # sample shares -> token shares with the full means
            means = {s: sum(data[s].tokens_in_order) / len(data[s].tokens_in_order) for s in kept}
            norm = sum(kept[s] * means[s] for s in kept)
            shares = {s: kept[s] * means[s] / norm for s in kept}
        for subset, share in shares.items():
            budget = max(1, round(share * max_tokens))
            targets[subset] = budget
            running, count = 0, 0
            for tokens in data[subset].tokens_in_order:
                if count and running + tokens > budget:
                    break
                running += tokens
                count += 1
            used[subset] = count
    used_tokens = {s: sum(data[s].tokens_in_order[: used[s]]) for s in kept}
    means_used = {s: used_tokens[s] / used[s] for s in kept}
    raw = {s: (kept[s] / means_used[s] if by == "tokens" and means_used[s] > 0 else kept[s]) for s in kept}
    raw_sum = sum(raw.values())
    blend = {s: float(f"{raw[s] / raw_sum:.9g}") for s in kept}
    token_mass = sum(blend[s] * means_used[s] for s in kept)
    shard_counts = {s: _shards_used(data[s].train_shards, used[s]) for s in kept}
    psi, handles = _choose_psi(list(shard_counts.values()), max_open_files)
    plan.open_files_per_worker = handles
    for subset in sorted(kept):
        target = targets[subset]
        plan.entries.append(
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
    return plan


def _yaml_text(plan: MixPlan, root: Path) -> str:
    train: list[dict[str, Any]] = []
    for entry in plan.entries:
        leaf: dict[str, Any] = {
            "weight": entry.blend_weight,
            "path": f"./{entry.subset}",
            "subflavors": {"source": entry.subset},
        }
        config = ensure_dataset_config(root / entry.subset, entry.parallel_shard_iters)
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
    """Plan the mix and write ``OUT/energon/<name>.yaml`` and ``<name>.mix.json`` atomically."""
    from ..storage import atomic_write_text

    plan = plan_mix(
        out,
        name=name,
        weights=weights,
        by=by,
        license_allow=license_allow,
        max_tokens=max_tokens,
        max_open_files=max_open_files,
    )
    root = Path(OutputLayout(out).energon)
    target = root / f"{name}.yaml"
    plan.path = str(target)
    atomic_write_text(root / f"{name}.mix.json", json.dumps(plan.to_dict(), indent=1, sort_keys=True) + "\n")
    atomic_write_text(target, _yaml_text(plan, root))
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
