"""The parameters of the suites (``$PARAMETER`` in their JSON) and the per-subset overrides that adjust them.

A subset's effective parameters are layered: the gate's own :data:`DEFAULT_PARAMS` and the run's options
and the model preset (:data:`RUN_PARAMS`, as the run gives them) < ``expectations/overrides.json``
(shipped, empty) < the user's file of the same shape (``--gate-overrides PATH``). Within a file, shell
patterns apply first (in file order), then the exact subset name. A bad override file is a
:class:`ConfigError` naming the file and the key, raised before any work starts.

A subset's entry may also hold ``"expectations": {"<suite>.<name>": "off" | "warn"}`` (``meta.name`` in the
suite's JSON, suites ``samples``, ``media`` and ``drift``): ``off`` does not run that expectation for the
subset, ``warn`` runs it and reports a failure as a warning that does not hold the subset back. Merged in
the same order as the parameters.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .suites import GATE_SUITES, expectations_text, load_suite

Param = float | int | None

# Parameters the run gives (its options and the model preset), taken as given (None: no limit).
RUN_PARAMS = ("max_reject_rate", "seq_len", "max_num_images", "min_pixels", "max_pixels")
# The gate's own parameters and their defaults (None: no limit / check off).
DEFAULT_PARAMS: dict[str, Param] = {
    "min_media_bytes": 1,
    "max_media_bytes": 4 * 1024**3,
    "max_rows_change": 0.05,
    "max_token_change": 0.05,
    "max_reject_rate_change": 0.01,
}
OVERRIDABLE = (*RUN_PARAMS, *DEFAULT_PARAMS)
# Filled by the gate itself, never overridable.
COMPUTED_PARAMS = ("rows", "ok_samples", "factor_squared")
# What None ("no limit") becomes when Great Expectations needs a number.
UNBOUNDED = 2**62
_NONE_AS = {"min_pixels": 0, "min_media_bytes": 0}
SHIPPED_OVERRIDES = "expectations/overrides.json"
# The key of a subset's entry that relaxes single expectations, and what it may set them to.
EXPECTATIONS_KEY = "expectations"
EXPECTATION_MODES = ("off", "warn")


def _is_pattern(key: str) -> bool:
    return any(c in key for c in "*?[")


@dataclass(frozen=True)
class GateOverrides:
    """Per-subset parameter overrides, in the order they apply (shipped file first, then the user's)."""

    entries: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    files: tuple[str, ...] = ()

    def _matching(self, subset: str) -> list[Mapping[str, Any]]:
        """The entries that apply to ``subset``: matching patterns first (in order), then exact names."""
        patterns = [v for k, v in self.entries if _is_pattern(k) and fnmatch.fnmatchcase(subset, k)]
        return patterns + [v for k, v in self.entries if not _is_pattern(k) and k == subset]

    def for_subset(self, subset: str) -> dict[str, Param]:
        """Merged parameter overrides of ``subset``."""
        out: dict[str, Param] = {}
        for values in self._matching(subset):
            out.update({k: v for k, v in values.items() if k != EXPECTATIONS_KEY})
        return out

    def expectations_for(self, subset: str) -> dict[str, str]:
        """Merged expectation modes of ``subset``: ``"<suite>.<name>"`` -> ``off`` or ``warn``."""
        out: dict[str, str] = {}
        for values in self._matching(subset):
            out.update(values.get(EXPECTATIONS_KEY) or {})
        return out


def load_overrides(path: str | Path | None = None) -> GateOverrides:
    """The shipped ``expectations/overrides.json`` plus the user's file ``path`` (which wins)."""
    entries = _parse_overrides(json.loads(expectations_text("overrides")), SHIPPED_OVERRIDES)
    files = [SHIPPED_OVERRIDES]
    if path is not None:
        entries += _parse_overrides(_read_user_file(path), str(path))
        files.append(str(Path(path)))
    return GateOverrides(tuple(entries), tuple(files))


def _read_user_file(path: str | Path) -> Any:
    """The JSON of ``--gate-overrides PATH``; ConfigError when it cannot be read or is not JSON."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--gate-overrides {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--gate-overrides {path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _parse_overrides(data: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """An override file's ``subsets`` entries, every parameter checked (ConfigError at the first bad one)."""
    entries: list[tuple[str, dict[str, Any]]] = []
    for name, values in _subsets_of(data, where).items():
        if not isinstance(values, dict):
            raise ConfigError(
                f"{where}: subsets.{name}: expected an object of parameter -> number, got {values!r}"
            )
        for param, value in values.items():
            check = _modes_problem if param == EXPECTATIONS_KEY else functools.partial(_param_problem, param)
            problem = check(value)
            if problem:
                raise ConfigError(f"{where}: subsets.{name}.{param}: {problem}")
        entries.append((str(name), dict(values)))
    return entries


def _subsets_of(data: Any, where: str) -> dict[str, Any]:
    """The ``subsets`` object of an override file (the only other top-level key allowed is ``notes``)."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: (top level): expected an object with a 'subsets' object, got {type(data).__name__}"
        )
    unknown_top = set(data) - {"subsets", "notes"}
    if unknown_top:
        raise ConfigError(
            f"{where}: (top level): unknown key(s) {sorted(unknown_top)}; expected 'subsets' (and 'notes')"
        )
    subsets = data.get("subsets", {})
    if not isinstance(subsets, dict):
        raise ConfigError(
            f"{where}: subsets: expected an object of subset name -> parameters, got {type(subsets).__name__}"
        )
    return subsets


def expectation_names() -> tuple[str, ...]:
    """Every ``"<suite>.<name>"`` a gate-overrides file may switch off or to a warning."""
    return tuple(
        f"{suite}.{exp['meta']['name']}" for suite in GATE_SUITES for exp in load_suite(suite)["expectations"]
    )


def _modes_problem(value: Any) -> str | None:
    """What is wrong with an ``expectations`` object, or None when every entry is valid."""
    if not isinstance(value, dict):
        return f'expected an object of "<suite>.<name>" -> {" | ".join(EXPECTATION_MODES)}, got {value!r}'
    known = expectation_names()
    for name, mode in value.items():
        if name not in known:
            return f"{name}: unknown expectation; known: {', '.join(known)}"
        if mode not in EXPECTATION_MODES:
            return f"{name}: expected one of {', '.join(EXPECTATION_MODES)}, got {mode!r}"
    return None


def _param_problem(param: str, value: Any) -> str | None:
    """What is wrong with overriding ``param`` by ``value``, or None when it is a valid override."""
    if param in COMPUTED_PARAMS:
        return "is computed by the gate and cannot be overridden"
    if param not in OVERRIDABLE:
        return f"unknown parameter; overridable: {', '.join(OVERRIDABLE)} (and {EXPECTATIONS_KEY})"
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"expected a number or null (no limit), got {value!r}"
    if value < 0:
        return f"must be >= 0, got {value!r}"
    if param == "max_reject_rate" and value > 1:
        return f"is a share of rows between 0 and 1, got {value!r}"
    return None


def gate_params(
    subset: str,
    *,
    max_reject_rate: float,
    seq_len: int | None,
    max_num_images: int | None,
    min_pixels: int | None,
    max_pixels: int | None,
    overrides: GateOverrides | None = None,
) -> dict[str, Param]:
    """Effective parameters of ``subset``: the gate's defaults and the run's options and preset (as given)
    < overrides."""
    params: dict[str, Param] = {
        "max_reject_rate": max_reject_rate,
        "seq_len": seq_len,
        "max_num_images": max_num_images,
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        **DEFAULT_PARAMS,
    }
    if overrides is not None:
        params.update(overrides.for_subset(subset))
    return params


def gx_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as Great Expectations needs them: numbers only (None becomes 'no limit')."""
    return {k: (_NONE_AS.get(k, UNBOUNDED) if v is None else v) for k, v in params.items()}
