"""The names the READMEs give a user exist (issue 33): every manifest table the output-folder section lists
is a view of ``vlmforge query`` and its ``--help`` lists them all; every ``cfg.`` parameter path that
infra/README.md names is a field of ``RunConfig``; the README says where the CLI is after ``make demo`` and
links the benchmarks' own page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.tables import TABLES

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_output_folder_lists_the_query_views() -> None:
    line = next(x for x in README.splitlines() if "manifests/<table>/subset=<name>/part-NNNNN.parquet" in x)
    listed = [name.strip() for name in line.split("part-NNNNN.parquet", 1)[1].split(",")]
    assert listed == list(TABLES)
    for name in re.findall(r"FROM (\w+)", README):
        assert name in TABLES, name


def test_query_help_lists_every_view() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vlmforge.flows.cli", "query", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    for name in TABLES:
        assert re.search(rf"\b{name}\b", done.stdout), (name, done.stdout)


def test_infra_readme_parameter_paths_exist() -> None:
    text = (ROOT / "infra" / "README.md").read_text()
    paths = re.findall(r"`cfg\.([\w.]+)`", text)
    assert paths, "infra/README.md names no cfg parameter"
    for path in paths:
        node: object = RunConfig.model_fields
        for part in path.split("."):
            fields = node if isinstance(node, dict) else node.model_fields  # type: ignore[attr-defined]
            assert part in fields, f"cfg.{path}"
            node = fields[part].annotation
    assert "cfg.subsets`" not in text


def test_readme_says_where_the_cli_is_and_links_the_benchmarks() -> None:
    first_screen = "\n".join(README.splitlines()[:45])
    assert ".venv/bin/vlmforge" in first_screen and "source .venv/bin/activate" in first_screen
    assert "Contents:" in first_screen
    assert "(benchmarks/README.md)" in README and (ROOT / "benchmarks" / "README.md").is_file()
