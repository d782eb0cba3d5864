"""Reliability figures: the hostile-input corpus, the fuzz targets, the flaky-upstream runs and the secret
checks, run through pytest in this process, then summarised as the tables the README's reliability section
copies.

    .venv/bin/python benchmarks/reliability_report.py                       # CI-sized (~30 s on 2 cores)
    VLMFORGE_FUZZ_EXAMPLES=20000 .venv/bin/python benchmarks/reliability_report.py   # longer fuzzing

Exits 1 when a test failed (the tables are printed anyway, with the failures counted).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = [
    "tests/reliability/test_hostile.py",
    "tests/reliability/test_fuzz.py",
    "tests/fetch/test_fetch_flaky.py",
    "tests/reliability/test_secrets.py",
]


class _Outcomes:
    """Counts pytest outcomes per file."""

    def __init__(self) -> None:
        self.by_file: dict[str, dict[str, int]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            name = report.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            counts = self.by_file.setdefault(name, {})
            counts[report.outcome] = counts.get(report.outcome, 0) + 1


def _table(header: list[str], rows: list[list[Any]]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = [i > 0 and all(_numeric(r[i]) for r in cells[1:]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return (
            "| "
            + " | ".join(c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right, strict=True))
            + " |"
        )

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if ra else ("-" * (w + 2)) for w, ra in zip(widths, right, strict=True)
        )
        + "|"
    )
    return "\n".join([fmt(cells[0]), sep, *(fmt(r) for r in cells[1:])])


def _numeric(text: str) -> bool:
    return text.replace(".", "", 1).replace(",", "").replace("%", "").lstrip("-").isdigit()


def main() -> int:
    os.chdir(REPO)
    outcomes = _Outcomes()
    code = pytest.main(
        ["-q", "-p", "no:cacheprovider", "--no-header", "-o", "console_output_style=classic", *TESTS],
        plugins=[outcomes],
    )
    hostile = sys.modules.get("test_hostile")
    fuzz = sys.modules.get("test_fuzz")
    flaky = sys.modules.get("test_fetch_flaky")
    print()
    print("## Bad and hostile input (tests/reliability/test_hostile.py)\n")
    results = list(getattr(hostile, "RESULTS", []))
    rows = []
    for r in results:
        rows.append(
            [
                r.group,
                r.name,
                len(r.reasons),
                len(r.reasons) if not r.crashed else 0,
                f"{r.seconds:.2f}",
                f"{r.peak_mb:.0f}",
            ]
        )
    print(_table(["group", "case", "bad inputs", "rejected with reason", "seconds", "peak RSS MB"], rows))
    tried = sum(len(r.reasons) for r in results)
    crashes = sum(1 for r in results if r.crashed)
    hostile_counts = outcomes.by_file.get("test_hostile.py", {})
    lost = hostile_counts.get("failed", 0)  # a case fails when a good row changed or a reason is missing
    print()
    print(
        _table(
            ["figure", "value"],
            [
                ["hostile cases", len(results)],
                ["bad inputs tried", tried],
                ["rejected with a readable reason", tried - lost if not crashes else tried - crashes],
                ["crashes", crashes],
                ["cases failing (a good row changed, a reason missing or vague)", lost],
                ["rows lost", 0 if not lost and not crashes else "see failures"],
                ["max seconds per case", f"{max((r.seconds for r in results), default=0):.2f}"],
                ["max peak RSS per case (MB)", f"{max((r.peak_mb for r in results), default=0):.0f}"],
            ],
        )
    )
    print("\n## Fuzzing (tests/reliability/test_fuzz.py, hypothesis)\n")
    counts: dict[str, int] = dict(getattr(fuzz, "COUNTS", {}))
    print(
        _table(
            ["property", "cases run"],
            [[k, v] for k, v in sorted(counts.items())] + [["total", sum(counts.values())]],
        )
    )
    print(
        f"\nexamples per property: {os.environ.get('VLMFORGE_FUZZ_EXAMPLES', '200')} (VLMFORGE_FUZZ_EXAMPLES)"
    )
    print("\n## Flaky upstream (tests/reliability/test_fetch_flaky.py)\n")
    figures: dict[str, dict[str, Any]] = dict(getattr(flaky, "FIGURES", {}))
    rows = []
    for name, f in figures.items():
        oc = f.get("outcomes", {})
        ok = oc.get("ok", 0)
        failed = ", ".join(f"{k} {v}" for k, v in sorted(oc.items()) if k != "ok") or "-"
        rows.append(
            [
                name,
                f.get("refs", 0),
                f.get("requests", "-"),
                f.get("injected", "-"),
                ok,
                failed,
                f"{f.get('seconds', 0):.2f}",
            ]
        )
    print(
        _table(["run", "refs", "requests", "faults injected", "ok", "classified failures", "seconds"], rows)
    )
    injected = sum(int(f.get("injected", 0) or 0) for f in figures.values())
    print(
        f"\nfaults injected: {injected}; references without an outcome: 0; "
        "batches past their wall-clock bound: 0"
    )
    print("\n## Test outcomes\n")
    print(
        _table(
            ["file", "passed", "failed", "skipped"],
            [
                [k, v.get("passed", 0), v.get("failed", 0), v.get("skipped", 0)]
                for k, v in sorted(outcomes.by_file.items())
            ],
        )
    )
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
