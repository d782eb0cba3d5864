"""Issue 43's smaller items (9): a subset name with a space refused before any service starts; Prefect's
client telemetry off (and so its first-run notice); help and tables whole at 80 columns when piped;
DuckDB's hints kept in a query error; no torch ``pin_memory`` warning on a read-back. No service starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing
import warnings
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from vlmforge.flows.cli import app
from vlmforge.flows.cli.options import run_options


def test_a_subset_name_with_a_space_is_refused_before_start_up(sample_release: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    (release / "my subset").mkdir(parents=True)
    source = sample_release / "photo_vqa"
    (release / "my subset" / "my subset.jsonl").write_bytes((source / "photo_vqa.jsonl").read_bytes())
    (release / "my subset" / "README.md").write_text("# my subset\n\nLicense: CC-BY-4.0\n")
    res = CliRunner().invoke(app, ["run", str(release), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "subset name 'my subset' holds ' '" in res.output and "rename it to 'my_subset'" in res.output
    assert not (tmp_path / "out").exists()  # refused before anything started or was written


def test_prefect_client_telemetry_is_off_in_every_vlmforge_process() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DO_NOT_TRACK"}
    code = (
        "import vlmforge.flows.cli\n"
        "from prefect._internal.analytics.enabled import is_telemetry_enabled\n"
        "print(is_telemetry_enabled())"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stdout + done.stderr


@pytest.mark.parametrize("command", [["run"], ["catalog"], ["refresh"]])
def test_help_at_80_columns_keeps_every_choice_whole(command: list[str]) -> None:
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    words = set(re.findall(r"[\w-]+", res.output))
    flags = set(re.findall(r"--[\w-]+", res.output))
    for option in run_options():
        if option.flag not in flags:
            continue  # not an option of this command
        if typing.get_origin(option.field.annotation) is typing.Literal:
            for choice in typing.get_args(option.field.annotation):
                assert choice in words, f"{option.flag}: {choice!r} cut in\n{res.output}"


def test_a_piped_catalog_table_cuts_no_word(sample_release: Path) -> None:
    res = CliRunner().invoke(app, ["catalog", str(sample_release)], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    for name in ("bad_rows", "multi_image", "photo_vqa", "video_qa", "CC-BY-SA-4.0", "README sha256"):
        assert name in res.output, res.output


def test_a_query_error_keeps_duckdbs_hints() -> None:
    from vlmforge.tasks.ops.query import one_line

    con = duckdb.connect()
    con.execute("CREATE TABLE samples (subset VARCHAR, status VARCHAR)")
    with pytest.raises(duckdb.Error) as column:
        con.execute("SELECT statuss FROM samples")
    with pytest.raises(duckdb.Error) as table:
        con.execute("SELECT * FROM sample")
    said = one_line(column.value)
    assert "Candidate bindings:" in said and '"status"' in said and "\n" not in said
    assert 'Did you mean "samples"' in one_line(table.value)
    assert "LINE 1" not in said


def test_a_read_back_on_a_machine_without_an_accelerator_warns_nothing() -> None:
    import torch.utils.data

    import vlmforge.tasks.validate.readback  # noqa: F401 - its filter is the subject

    with warnings.catch_warnings(record=True) as seen:
        list(torch.utils.data.DataLoader([1, 2, 3], pin_memory=True))
    assert not [w for w in seen if "pin_memory" in str(w.message)], [str(w.message) for w in seen]
