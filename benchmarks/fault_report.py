"""The fault figures of issue 11 as one table: kill points, survived, rows lost, faults injected, bytes equal.

    python benchmarks/fault_report.py                     # runs the fault tests, then prints the table
    python benchmarks/fault_report.py --json FILE         # prints the figures a test run already wrote
    VLMFORGE_FAULT_KILLS_PER_STAGE=8 python benchmarks/fault_report.py   # more kill points (5 stages)

The tests (``tests/reliability/test_faults.py``) write their figures to the JSON file named by
``VLMFORGE_FAULT_REPORT``;
without ``--json`` this script runs them with that variable set to a temporary file (they need root for the
disk-full case, which mounts a size-limited tmpfs, and skip it otherwise). ``--markdown`` prints the table as
Markdown for the README's reliability section.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("fault", "kill points", "survived", "rows lost", "faults injected", "bytes equal", "seconds")


def run_tests(report: Path, extra: list[str]) -> int:
    env = os.environ | {"VLMFORGE_FAULT_REPORT": str(report)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-s",
        "tests/reliability/test_faults.py",
        *extra,
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, check=False).returncode


def rows(data: dict[str, Any]) -> list[dict[str, str]]:
    out = []
    kill = data.get("sigkill")
    if kill:
        stages = ", ".join(f"{k} {v}" for k, v in kill["by_stage"].items())
        out.append(
            {
                "fault": f"SIGKILL of the whole run ({stages})",
                "kill points": str(kill["kill_points"]),
                "survived": str(kill["survived"]),
                "rows lost": str(kill["rows_lost"]),
                "faults injected": str(kill["kill_points"]),
                "bytes equal": "yes" if kill["bytes_equal"] else "NO",
                "seconds": f"{kill['seconds']:.0f}",
            }
        )
    worker = data.get("worker_kill")
    if worker:
        out.append(
            {
                "fault": "Ray worker SIGKILLed mid-task (" + ", ".join(worker["faults"]) + ")",
                "kill points": "-",
                "survived": str(worker["faults_injected"] if worker["bytes_equal"] else 0),
                "rows lost": "0" if worker["bytes_equal"] else "?",
                "faults injected": str(worker["faults_injected"]),
                "bytes equal": "yes" if worker["bytes_equal"] else "NO",
                "seconds": f"{worker['seconds']:.0f}",
            }
        )
    disk = data.get("disk_full")
    if disk:
        out.append(
            {
                "fault": "output volume full (tmpfs), then space freed",
                "kill points": "-",
                "survived": "1" if disk["bytes_equal"] and disk["published_intact"] else "0",
                "rows lost": "0" if disk["bytes_equal"] else "?",
                "faults injected": str(disk["faults_injected"]),
                "bytes equal": "yes" if disk["bytes_equal"] else "NO",
                "seconds": f"{disk['seconds']:.0f}",
            }
        )
    return out


def render(table: list[dict[str, str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * (len(COLUMNS) - 1)]
        lines += ["| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in table]
        return "\n".join(lines)
    widths = {c: max(len(c), *(len(r[c]) for r in table)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS), "  ".join("-" * widths[c] for c in COLUMNS)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS) for r in table]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="figures written by a test run (VLMFORGE_FAULT_REPORT)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. -k sigkill)")
    args = parser.parse_args(argv)
    rc = 0
    if args.json is None:
        report = Path(tempfile.mkdtemp(prefix="vlmforge-faults-")) / "faults.json"
        rc = run_tests(report, args.pytest_args)
    else:
        report = args.json
    if not report.is_file():
        print(f"no figures at {report} (did the tests run?)", file=sys.stderr)
        return rc or 1
    data = json.loads(report.read_text())
    table = rows(data)
    if not table:
        print(f"{report} holds no fault figures", file=sys.stderr)
        return rc or 1
    print(render(table, args.markdown))
    kill = data.get("sigkill")
    if kill:
        left = kill.get("leftover_temp", {})
        print(
            f"\nreference run {kill['reference_run_s']} s; stage seconds {kill['stage_s']}; "
            f"objects stored before a kill {kill['stored_before_a_kill']}, fetched again "
            f"{kill['refetched_objects']}; left under temporary names after the final rerun: {left}"
        )
    return rc


if __name__ == "__main__":
    sys.exit(main())
