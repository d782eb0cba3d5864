"""Change-driven reruns: compare a fresh catalog with the last run's ``subsets`` manifest and decide.

A subset is rerun when its README, license, JSONL, media recipe or media tars changed since the run that
last wrote its ``subsets`` row, or when it is new; the others are left untouched (their manifests and
shards keep their bytes and mtimes); subsets that are gone upstream are unpublished. Every decision comes
with the reasons a person reads (``README changed (sha256 1a2b3c4d.. -> 5e6f7a8b..)``).

The license history lives in the ``subsets`` manifest itself: :func:`catalog_columns` carries
``previous_license`` and ``license_changed_at`` / ``license_changed_run`` forward from the previous row and
sets them when the license moves. ``--license-allow`` (on ``run`` and on mix building) keeps only subsets
whose license matches one of the given SPDX ids or ``fnmatch`` patterns, case-insensitively.

Nothing here imports Prefect or Ray; the flow calls these functions (see the ``refresh`` command).
"""

from __future__ import annotations

import fnmatch
import shutil
import time
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...schemas.config import ExecutionOptions, RunConfig
from ...schemas.option_values import comma_list
from ...schemas.records import SubsetEntry
from ...schemas.tables import CATALOG_FIELDS, SUBSETS
from ..manifests import OutputLayout, write_parquet
from ..storage import is_local

# Columns of the ``subsets`` manifest that describe the upstream (compared by a refresh).
_WATCHED = ("readme_sha256", "license", "jsonl_sha256", "media_recipe_sha256", "media_tars")


@dataclass(frozen=True)
class SubsetChange:
    subset: str
    action: str  # rerun | unchanged | unpublish
    reasons: tuple[str, ...] = ()

    def describe(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else "nothing changed upstream"
        return f"{self.subset}: {self.action} ({why})"


@dataclass
class RefreshPlan:
    """What a refresh does to each subset, with the reasons."""

    changes: list[SubsetChange] = field(default_factory=list)

    def _names(self, action: str) -> list[str]:
        return [c.subset for c in self.changes if c.action == action]

    @property
    def rerun(self) -> list[str]:
        return self._names("rerun")

    @property
    def unchanged(self) -> list[str]:
        return self._names("unchanged")

    @property
    def unpublish(self) -> list[str]:
        return self._names("unpublish")

    def by_subset(self) -> dict[str, SubsetChange]:
        return {c.subset: c for c in self.changes}

    def lines(self) -> list[str]:
        """One line per subset, reruns first, then removals, then the untouched ones."""
        order = {"rerun": 0, "unpublish": 1, "unchanged": 2}
        return [c.describe() for c in sorted(self.changes, key=lambda c: (order[c.action], c.subset))]


def subsets_schema() -> pa.Schema:
    """The ``subsets`` manifest schema with the catalog's columns (a no-op once SUBSETS has them)."""
    schema = SUBSETS
    for f in CATALOG_FIELDS:
        if schema.get_field_index(f.name) < 0:
            schema = schema.append(f)
    return schema


def write_subsets_row(layout: OutputLayout, row: Mapping[str, Any]) -> str:
    """Atomically write a subset's one-row ``subsets`` part with the catalog columns included."""
    schema = subsets_schema()
    table = pa.Table.from_pylist([{k: row.get(k) for k in schema.names}], schema=schema)
    return write_parquet(layout.fs, layout.part("subsets", str(row["subset"]), 0), table)


def read_previous_catalog(layout: OutputLayout) -> dict[str, dict[str, Any]]:
    """The last ``subsets`` row of every subset of an output folder (empty when there was no run).

    Read without forcing the current schema, so rows written before a column existed still load (the
    column is then absent from the row) and columns added since are kept.
    """
    out: dict[str, dict[str, Any]] = {}
    for subset in layout.subsets_with("subsets"):
        for path in layout.parts("subsets", subset):
            with layout.fs.open(path, "rb") as f:
                rows = pq.read_table(f).to_pylist()
            for row in rows:
                row["subset"] = subset  # hive partition value (the file may not carry the column)
                out[subset] = row
    return out


def _short(sha: Any) -> str:
    return f"{sha[:8]}.." if isinstance(sha, str) and sha else "none"


def _entry_value(entry: SubsetEntry, column: str) -> Any:
    if column == "media_tars":
        return len(entry.media_tars)
    return getattr(entry, column)


def change_reasons(entry: SubsetEntry, previous: Mapping[str, Any]) -> list[str]:
    """Why ``entry`` differs from its previous ``subsets`` row (empty when it does not)."""
    reasons: list[str] = []
    for column in _WATCHED:
        if column not in previous:  # an older manifest without this column: nothing to compare
            continue
        old, new = previous[column], _entry_value(entry, column)
        if old == new:
            continue
        if column == "readme_sha256":
            reasons.append(f"README changed (sha256 {_short(old)} -> {_short(new)})")
        elif column == "license":
            reasons.append(f"license changed ({old} -> {new})")
        elif column == "jsonl_sha256":
            detail = f"sha256 {_short(old)} -> {_short(new)}"
            if previous.get("rows") is not None and previous.get("rows") != entry.rows:
                detail += f", rows {previous['rows']} -> {entry.rows}"
            reasons.append(f"JSONL changed ({detail})")
        elif column == "media_recipe_sha256":
            reasons.append(f"media recipe changed ({_short(old)} -> {_short(new)})")
        else:
            reasons.append(f"media tars changed ({old} -> {new} files)")
    return reasons


def plan_refresh(
    entries: Iterable[SubsetEntry],
    previous: Mapping[str, Mapping[str, Any]],
    *,
    only: Collection[str] = (),
    retry_unpublished: bool = False,
) -> RefreshPlan:
    """Decide per subset: ``rerun`` (new or changed upstream), ``unchanged``, or ``unpublish`` (gone).

    ``only`` limits the decision to those subsets (the rest of the release is not looked at and nothing
    is unpublished). With ``retry_unpublished`` a subset whose last run was held back is rerun too.
    """
    plan = RefreshPlan()
    seen: set[str] = set()
    wanted = set(only)
    for entry in sorted(entries, key=lambda e: e.subset):
        if wanted and entry.subset not in wanted:
            continue
        seen.add(entry.subset)
        prev = previous.get(entry.subset)
        if prev is None:
            plan.changes.append(SubsetChange(entry.subset, "rerun", ("new subset",)))
            continue
        reasons = change_reasons(entry, prev)
        if not reasons and prev.get("beyond_limit"):
            reasons = [
                f"partial: a trial run (--limit) left {prev['beyond_limit']} of {prev.get('rows')} rows out"
            ]
        if not reasons and retry_unpublished and not prev.get("published"):
            reasons = [f"last run was not published ({prev.get('gate') or 'no gate result'})"]
        action = "rerun" if reasons else "unchanged"
        plan.changes.append(SubsetChange(entry.subset, action, tuple(reasons)))
    if not wanted:
        for subset in sorted(set(previous) - seen):
            plan.changes.append(SubsetChange(subset, "unpublish", ("removed upstream",)))
    return plan


def catalog_columns(
    entry: SubsetEntry,
    previous: Mapping[str, Any] | None,
    *,
    run_id: str,
    now: str | None = None,
) -> dict[str, Any]:
    """The catalog's columns of ``entry``'s new ``subsets`` row, license history carried forward.

    ``previous_license`` / ``license_changed_at`` / ``license_changed_run`` keep the last change: set when
    the license differs from the previous row's, copied from it otherwise (null until a first change).
    """
    now = now or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    prev = previous or {}
    row: dict[str, Any] = {
        "subset": entry.subset,
        "readme_sha256": entry.readme_sha256,
        "jsonl_sha256": entry.jsonl_sha256,
        "jsonl_bytes": entry.jsonl_bytes,
        "license": entry.license,
        "license_text": entry.license_text,
        "media_tars": len(entry.media_tars),
        "rows": entry.rows + entry.beyond_limit,  # the JSONL's lines, taken or not (--limit)
        "revision": entry.revision,
        "release": entry.release,
        "media_sources": list(entry.media_sources),
        "media_recipe_sha256": entry.media_recipe_sha256,
        "duplicate_rows": len(entry.duplicate_rows),
        "id_conflicts": len(entry.id_conflicts),
        "previous_license": prev.get("previous_license"),
        "license_changed_at": prev.get("license_changed_at"),
        "license_changed_run": prev.get("license_changed_run"),
        "run_id": run_id,
    }
    if previous is not None and "license" in prev and prev["license"] != entry.license:
        row.update(previous_license=prev["license"], license_changed_at=now, license_changed_run=run_id)
    return row


def license_allowed(license_id: str | None, allow: Collection[str]) -> bool:
    """True when ``license_id`` matches one of ``allow`` (SPDX ids or fnmatch patterns, any case).

    An empty ``allow`` allows everything; ``unknown`` passes only when listed.
    """
    if not allow:
        return True
    lid = (license_id or "unknown").lower()
    return any(fnmatch.fnmatchcase(lid, pattern.strip().lower()) for pattern in allow if pattern.strip())


def split_by_license(
    entries: Iterable[SubsetEntry], allow: Collection[str]
) -> tuple[list[SubsetEntry], list[tuple[str, str]]]:
    """(entries to run, [(subset, reason)] excluded by ``--license-allow``)."""
    kept: list[SubsetEntry] = []
    excluded: list[tuple[str, str]] = []
    for e in entries:
        if license_allowed(e.license, allow):
            kept.append(e)
        else:
            excluded.append((e.subset, f"license {e.license} not in --license-allow {','.join(allow)}"))
    return kept, excluded


def parse_license_allow(values: Iterable[str] | None) -> list[str]:
    """``--license-allow CC-BY-4.0,MIT --license-allow Apache-2.0`` as one list."""
    return list(comma_list(values))


def unpublish_subset(layout: OutputLayout, subset: str) -> bool:
    """Take ``energon/<subset>`` out of the published output (renamed aside, then deleted).

    The rename is atomic, so a reader sees the whole dataset or none; manifests stay as history. Call
    :func:`vlmforge.tasks.publish.publish.publish_metadataset` afterwards. Returns whether anything was
    removed.
    """
    if not is_local(layout.fs):  # an object store: the listing (the published mark) first, then the rest
        root = f"{layout.energon}/{subset}"
        if not layout.fs.exists(f"{root}/vlmforge-shards.json"):
            return False
        layout.fs.rm(f"{root}/vlmforge-shards.json")
        layout.fs.rm(root, recursive=True)
        layout.fs.invalidate_cache(layout.energon)
        return True
    dest = Path(layout.energon) / subset
    if not dest.exists():
        return False
    trash = dest.parent / f".{subset}.unpublished-{uuid.uuid4().hex[:8]}"
    dest.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)
    return True


def last_run_options(out: str) -> dict[str, Any] | None:
    """The options (``config`` of ``runs/<run>.json``) of the newest run in ``out``, or None.

    A refresh reuses them so the subsets it reruns are built like the ones it leaves untouched.
    """
    import json

    layout = OutputLayout(out)
    folder = f"{layout.root}/runs"
    if not layout.fs.isdir(folder):
        return None
    runs = sorted(p for p in layout.fs.ls(folder, detail=False) if p.endswith(".json"))
    for path in reversed(runs):  # run ids start with a UTC timestamp: the last name is the newest run
        try:
            config = json.loads(layout.fs.cat_file(path)).get("config")
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            return config
    return None


# --- a refresh's plan and options ---------------------------------------------------------------


def plan_release_refresh(
    entries: Sequence[SubsetEntry],
    out: str,
    license_allow: Collection[str] = (),
    *,
    retry_unpublished: bool = False,
) -> RefreshPlan:
    """The refresh plan of ``entries`` against ``out``'s last run; disallowed published subsets come out."""
    kept, excluded = split_by_license(entries, license_allow)
    previous = read_previous_catalog(OutputLayout(out))
    plan = plan_refresh(kept, previous, retry_unpublished=retry_unpublished)
    why_out = dict(excluded)
    # a subset whose license is no longer allowed comes out, once, for that reason (it is not gone upstream)
    plan.changes = [c for c in plan.changes if c.subset not in why_out]
    for subset, why in excluded:
        if subset in previous:
            plan.changes.append(SubsetChange(subset, "unpublish", (why,)))
    return plan


# Where the last run ran is not part of how it built its outputs: a refresh runs where it is told.
_EXECUTION_OPTIONS = frozenset(ExecutionOptions.model_fields)


def refresh_config(
    release: str,
    out: str,
    subsets: Sequence[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    license_allow: Sequence[str] = (),
    overrides: Mapping[str, Any] | None = None,
) -> RunConfig:
    """A refresh's run options: the last run's (reruns are built like the rest), then ``overrides``.

    It makes a whole ``RunConfig`` (the one stage function that does) because a refresh is a run: its config
    goes to the run flow, which hands each stage its own options (``schemas/stage_options.py``)."""
    known = RunConfig.of(release=release, out=out).flat()
    last = RunConfig.flatten(last_run_options(out) or {})
    options: dict[str, Any] = {k: v for k, v in last.items() if k in known and k not in _EXECUTION_OPTIONS}
    options.update(overrides or {})
    options.update(
        release=release,
        out=out,
        subsets=tuple(subsets),
        storage_options=dict(storage_options or {}),
        license_allow=tuple(license_allow),
        limit=None,  # a refresh completes what a trial run (--limit) left partial
    )
    return RunConfig(**options)
