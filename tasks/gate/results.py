"""Gate results: the record of one gate stage, written per run and subset, read back for people.

Layout under ``OUT/quality/``::

    index.json                      results index: one entry per run (time, subsets passed / failed, docs)
    <run>/run.json                  the run's gate settings: skip_gate, override files, subsets
    <run>/<subset>.json             gate stage (samples, media, drift): GateResult as JSON, GX results inside
    <run>/<subset>.shards.json      shards stage, on the staged Energon dataset
    <run>/docs/...                  Data Docs (:mod:`.docs`)

The records are plain JSON, so ``vlmforge quality OUT`` and the Prefect artifact (:mod:`.report`) show
them without DuckDB or Great Expectations.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import OutputError
from ..manifests import OutputLayout
from ..storage import atomic_write_bytes
from .params import GateOverrides

ENGINE = "duckdb profile + great_expectations pandas"
RUN_FILE = "run.json"
DOCS = "docs"


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
    # failures of expectations a gate-overrides file set to "warn": reported, not holding the subset back
    warnings: list[str] = field(default_factory=list)
    relaxed: dict[str, str] = field(default_factory=dict)  # "<suite>.<name>" -> "off" | "warn" (overrides)

    def summary(self) -> str:
        if not self.passed:
            return "failed: " + "; ".join(self.failures)
        return "passed" + (" with warnings: " + "; ".join(self.warnings) if self.warnings else "")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GateResult:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def gate_summary(results: Sequence[GateResult]) -> str:
    """One line per failed subset (for logs and the CLI)."""
    return "\n".join(f"{r.subset}: {r.summary()}" for r in results if not r.passed)


# --------------------------------------------------------------------------------------------------------
# Writing


def run_folder(layout: OutputLayout, run_id: str) -> str:
    return f"{layout.quality}/{run_id}"


def now() -> str:
    """The local time as results and the index record it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def write_json(layout: OutputLayout, path: str, data: Any) -> str:
    atomic_write_bytes(layout.fs, path, json.dumps(data, indent=1, default=str, sort_keys=False).encode())
    return path


def read_json(layout: OutputLayout, path: str) -> Any:
    with layout.fs.open(path, "rb") as f:
        return json.loads(f.read())


def record_gate(layout: OutputLayout, run_id: str, result: GateResult) -> str:
    """Write ``result`` to ``OUT/quality/<run_id>/<subset>.json`` (``<subset>.shards.json`` for shards)."""
    suffix = ".json" if result.stage == "gate" else f".{result.stage}.json"
    path = f"{run_folder(layout, run_id)}/{result.subset}{suffix}"
    return write_json(layout, path, result.to_json() | {"run_id": run_id, "recorded": now()})


def carry_results(layout: OutputLayout, subset: str, from_run: str, to_run: str) -> int:
    """Copy ``subset``'s results of ``from_run`` into ``to_run``'s folder, each marked ``carried_from``: the
    subset did not change, so the earlier verdict stands for this run too. Returns the files copied."""
    copied = 0
    for suffix in (".json", ".shards.json"):
        source = f"{run_folder(layout, from_run)}/{subset}{suffix}"
        try:
            data = read_json(layout, source)
        except (OSError, ValueError):
            continue
        data["carried_from"] = data.get("carried_from") or from_run
        write_json(layout, f"{run_folder(layout, to_run)}/{subset}{suffix}", data)
        copied += 1
    return copied


def record_run(
    layout: OutputLayout,
    run_id: str,
    *,
    subsets: Sequence[str],
    skip_gate: bool,
    overrides: GateOverrides | None = None,
) -> str:
    """Write the run's gate settings (``--skip-gate``, override files, selected subsets) to ``run.json``."""
    data = {
        "run_id": run_id,
        "recorded": now(),
        "skip_gate": skip_gate,
        "overrides": list(overrides.files) if overrides else [],
        "override_entries": [[k, dict(v)] for k, v in overrides.entries] if overrides else [],
        "subsets": list(subsets),
    }
    return write_json(layout, f"{run_folder(layout, run_id)}/{RUN_FILE}", data)


# --------------------------------------------------------------------------------------------------------
# Reading


@dataclass
class SubsetQuality:
    """Everything recorded for one subset in one run (gate and shards stages)."""

    subset: str
    results: list[GateResult] = field(default_factory=list)
    skipped: bool = False

    @property
    def passed(self) -> bool | None:
        """True or False once checked; None when the gate was skipped or never ran for the subset."""
        if not self.results:
            return None
        return all(r.passed for r in self.results)

    @property
    def suites(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for r in self.results:
            out.update(r.suites)
        return out

    @property
    def failures(self) -> list[str]:
        return [f for r in self.results for f in r.failures]

    @property
    def status(self) -> str:
        if self.skipped and not self.results:
            return "skipped (--skip-gate)"
        passed = self.passed
        return "not run" if passed is None else "passed" if passed else "failed"


@dataclass
class RunQuality:
    run_id: str
    subsets: dict[str, SubsetQuality]
    skip_gate: bool = False
    overrides: list[str] = field(default_factory=list)
    recorded: str | None = None
    docs: str | None = None  # path of docs/index.html when built

    @property
    def failed(self) -> list[str]:
        return [name for name, s in self.subsets.items() if s.passed is False]


def _run_time(layout: OutputLayout, folder: str) -> float:
    try:
        return max(float(layout.fs.modified(p).timestamp()) for p in layout.fs.ls(folder, detail=False))
    except (ValueError, OSError, NotImplementedError):
        return 0.0


def list_runs(layout: OutputLayout) -> list[str]:
    """Run ids with quality results, oldest first (by the time their results were written)."""
    if not layout.fs.isdir(layout.quality):
        return []
    runs = []
    for p in layout.fs.ls(layout.quality, detail=False):
        name = p.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith((".", "_")) or not layout.fs.isdir(p):  # _assets: the docs' shared files
            continue
        runs.append((_run_time(layout, p), name))
    return [name for _t, name in sorted(runs)]


def load_run(layout: OutputLayout, run_id: str | None = None) -> RunQuality:
    """The recorded results of ``run_id`` (default: the latest run). OutputError when there are none."""
    run = RunQuality(run_id=_pick_run(layout, run_id), subsets={})
    folder = run_folder(layout, run.run_id)
    _read_settings(layout, folder, run)
    _read_results(layout, folder, run)
    docs = f"{folder}/{DOCS}/index.html"
    run.docs = docs if layout.fs.isfile(docs) else None
    run.subsets = dict(sorted(run.subsets.items()))
    return run


def _pick_run(layout: OutputLayout, run_id: str | None) -> str:
    """``run_id`` when it has results, else the latest run; OutputError when there is none to show."""
    runs = list_runs(layout)
    if not runs:
        raise OutputError(
            f"{layout.out!r} has no quality results (OUT/quality/ is empty): run `vlmforge run RELEASE "
            f"--out {layout.out}` first"
        )
    if run_id is None:
        return runs[-1]
    if run_id not in runs:
        raise OutputError(f"no quality results for run {run_id!r}; runs: {', '.join(runs[-10:])}")
    return run_id


def _read_settings(layout: OutputLayout, folder: str, run: RunQuality) -> None:
    """The run's ``run.json`` (when there is one): gate settings and the subsets it selected."""
    if not layout.fs.isfile(f"{folder}/{RUN_FILE}"):
        return
    meta = read_json(layout, f"{folder}/{RUN_FILE}")
    run.skip_gate = bool(meta.get("skip_gate"))
    run.overrides = list(meta.get("overrides") or [])
    run.recorded = meta.get("recorded")
    for name in meta.get("subsets") or []:
        run.subsets[name] = SubsetQuality(name, skipped=run.skip_gate)


def _read_results(layout: OutputLayout, folder: str, run: RunQuality) -> None:
    """Every recorded stage result of the run, by subset (gate stage first); unreadable files are skipped."""
    for p in sorted(layout.fs.ls(folder, detail=False)):
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(".json") or name == RUN_FILE or name.startswith("."):
            continue
        try:
            result = GateResult.from_json(read_json(layout, p))
        except (ValueError, TypeError, OSError):
            continue
        run.subsets.setdefault(result.subset, SubsetQuality(result.subset, skipped=run.skip_gate))
        run.subsets[result.subset].results.append(result)
    for sq in run.subsets.values():
        sq.results.sort(key=lambda r: r.stage != "gate")
