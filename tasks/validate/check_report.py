"""The result of validating a dataset (or a metadataset yaml), and its text for people."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ValidationReport", "format_reports", "listed"]

_MAX_LISTED = 10


@dataclass
class ValidationReport:
    path: Path
    ok: bool = True
    #: the subset, when validated from the manifests
    subset: str | None = None
    #: split -> samples read through the loader
    counts: dict[str, int] = field(default_factory=dict)
    #: split -> samples expected (len(expected[split]))
    expected_counts: dict[str, int] = field(default_factory=dict)
    #: key -> media part names of the cooked sample, numeric order
    media_parts: dict[str, list[str]] = field(default_factory=dict)
    #: sample-level errors reported by energon's error handler (repr + key)
    errors: list[str] = field(default_factory=list)
    #: human-readable problems; empty iff ok
    problems: list[str] = field(default_factory=list)
    #: samples read per split was limited to this (None: every sample was read)
    sample_limit: int | None = None

    def add(self, problem: str) -> None:
        self.problems.append(problem)
        self.ok = False


def listed(items: list[str]) -> str:
    """The first few ``items`` joined, with how many more there are."""
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f", … (+{len(items) - _MAX_LISTED})" if len(items) > _MAX_LISTED else "")


def format_reports(reports: Sequence[ValidationReport]) -> str:
    """One line per dataset (``ok``/``FAILED``, samples read per split) followed by its problems."""
    lines: list[str] = []
    for report in reports:
        name = report.subset or report.path.name
        read = ", ".join(
            f"{split} {report.counts.get(split, 0)}/{report.expected_counts.get(split, 0)}"
            for split in sorted(report.expected_counts)
            if report.expected_counts[split] or report.counts.get(split)
        )
        scope = f" (first {report.sample_limit} per split)" if report.sample_limit is not None else ""
        lines.append(f"{'ok' if report.ok else 'FAILED':6} {name}: {read or '-'} samples read{scope}")
        lines += [f"       - {problem}" for problem in report.problems]
    failed = sum(not r.ok for r in reports)
    lines.append(f"{len(reports) - failed} ok, {failed} failed")
    return "\n".join(lines)
