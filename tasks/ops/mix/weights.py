"""``--weights``, ``--license-allow`` and ``--max-tokens`` as users write them, resolved against the
published subsets."""

from __future__ import annotations

import fnmatch
import math
import re

from ...errors import ConfigError

__all__ = ["license_allowed", "parse_count", "parse_weights", "resolve_weights"]

_COUNT_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([kmbgt]?)\s*$", re.IGNORECASE)
_COUNT_POWER = {"": 0, "k": 3, "m": 6, "b": 9, "g": 9, "t": 12}


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


def license_allowed(license_id: str, allow: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(license_id.lower(), pattern.lower()) for pattern in allow)
