"""A licence change anywhere in a subset's README (issue 43, item 8): a non-commercial term written below the
first ``License:`` line narrows the subset's license, so ``--license-allow`` takes it out, and ``refresh
--license-allow`` names each subset it takes out once, for its license. Drives the CLI in process (the
catalog and a refresh's plan need no service); the earlier run's ``subsets`` rows are written as a run writes
them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vlmforge.flows.cli import app
from vlmforge.tasks.catalog import catalog_columns, catalog_release, write_subsets_row
from vlmforge.tasks.catalog.licenses import detect_license
from vlmforge.tasks.manifests import OutputLayout

ROW = {"id": "r0", "messages": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hi."}]}


@pytest.mark.parametrize(
    ("readme", "license_id"),
    [
        ("License: CC-BY-4.0\n", "CC-BY-4.0"),
        ("License: CC-BY-4.0\n\nImages are now CC-BY-NC-4.0 (non-commercial use only).\n", "CC-BY-NC-4.0"),
        ("License: CC-BY-SA-4.0\n\nFor non-commercial use only.\n", "CC-BY-NC-SA-4.0"),
        ("License: CC-BY-4.0\n\nSome images: CC-BY-NC-ND-4.0; others CC-BY-NC-4.0.\n", "CC-BY-NC-ND-4.0"),
        ("License: Apache-2.0\n\nThe images are not for commercial use.\n", "LicenseRef-NonCommercial"),
        ("## License\nCreative Commons Attribution-NonCommercial 4.0\n", "CC-BY-NC-4.0"),
        ("License: MIT\n\nCommercial use is permitted.\n", "MIT"),
    ],
)
def test_a_non_commercial_term_anywhere_narrows_the_license(readme: str, license_id: str) -> None:
    assert detect_license(f"# subset\n\n{readme}") == (license_id, None)


def _release(root: Path) -> Path:
    for name in ("charts", "photos"):
        folder = root / "release" / name
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(f"# {name}\n\nLicense: CC-BY-4.0\n")
        (folder / f"{name}.jsonl").write_text(json.dumps(ROW) + "\n")
    return root / "release"


def test_refresh_takes_out_a_subset_whose_readme_added_a_non_commercial_term_once(tmp_path: Path) -> None:
    release, out = _release(tmp_path), tmp_path / "out"
    for entry in catalog_release(str(release)):  # the earlier run published both
        row = catalog_columns(entry, None, run_id="r0") | {"published": True, "gate": "passed"}
        write_subsets_row(OutputLayout(str(out)), row)
    with (release / "charts" / "README.md").open("a") as f:
        f.write("\nImages are now CC-BY-NC-4.0 (non-commercial use only).\n")

    listed = CliRunner().invoke(app, ["catalog", str(release), "--json"])
    assert listed.exit_code == 0, listed.output
    assert {r["subset"]: r["license"] for r in json.loads(listed.output)} == {
        "charts": "CC-BY-NC-4.0",
        "photos": "CC-BY-4.0",
    }

    args = ["refresh", str(release), "--out", str(out), "--license-allow", "CC-BY-4.0", "--dry-run"]
    plan = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert plan.exit_code == 0, plan.output
    rows = [line for line in plan.output.splitlines() if "charts" in line]
    assert len(rows) == 1, plan.output  # once, for its license; not also "removed upstream"
    assert "unpublish" in rows[0] and "license CC-BY-NC-4.0 not in --license-allow CC-BY-4.0" in rows[0]
    assert "removed upstream" not in plan.output
    photos = next(line for line in plan.output.splitlines() if "photos" in line)
    assert "unchanged" in photos
