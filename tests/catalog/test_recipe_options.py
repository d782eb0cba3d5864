"""One option set for every command that reads media recipes (issue 43, item 2): ``run``, ``catalog
--estimate``, ``refresh`` and ``recipe`` take ``--env-allow``, ``--recipes``, ... made from the same
run-config fields, and an estimate whose recipe needs a variable the user did not allow says so. Drives the
CLI in process; no service starts (an estimate and ``--help`` need none)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from http_fixture import HttpFixture
from typer.testing import CliRunner

from vlmforge.flows.cli import app

VARIABLE = "VLMFORGE_TEST_MIRROR"


def _release(root: Path, refs: list[str]) -> Path:
    folder = root / "release" / "mirrored"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("# mirrored\n\nLicense: CC0-1.0\n")
    rows = [
        {
            "id": f"r{i}",
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": ref}, "What is it?"]},
                {"role": "assistant", "content": f"Picture {i}."},
            ],
        }
        for i, ref in enumerate(refs)
    ]
    (folder / "mirrored.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recipes = root / "recipes"
    recipes.mkdir()
    (recipes / "mirrored.yaml").write_text(
        "subset: mirrored\nlicense: CC0-1.0\nsources:\n"
        f'  - kind: http_files\n    url: "${{{VARIABLE}}}/media/{{name}}"\n'
    )
    return root


@pytest.fixture
def mirrored(tmp_path: Path, srv: HttpFixture, monkeypatch: pytest.MonkeyPatch) -> Path:
    refs = [f"p{i}.jpg" for i in range(5)]
    for ref in refs:
        srv.add(f"/media/{ref}", b"\xff\xd8" + bytes(1000))
    monkeypatch.setenv(VARIABLE, srv.url(""))
    return _release(tmp_path, refs)


def _estimate(root: Path, *extra: str) -> dict[str, object]:
    args = ["catalog", str(root / "release"), "--estimate", "--recipes", str(root / "recipes")]
    res = CliRunner().invoke(app, [*args, "--decode-sample", "0", "--json", *extra])
    assert res.exit_code == 0, res.output
    total: dict[str, object] = json.loads(res.output)["total"]
    return total


def test_the_estimate_takes_env_allow_and_says_why_references_have_no_source(mirrored: Path) -> None:
    refused = _estimate(mirrored)
    assert refused["missing"] == 5 and refused["objects"] == 0
    assert f"--env-allow {VARIABLE}" in str(refused["missing_why"]), refused["missing_why"]
    res = CliRunner().invoke(
        app,
        ["catalog", str(mirrored / "release"), "--estimate", "--recipes", str(mirrored / "recipes")]
        + ["--decode-sample", "0"],
        env={"COLUMNS": "200"},
    )
    assert res.exit_code == 0 and "5 references no source answers (5 x " in res.output, res.output
    assert f"--env-allow {VARIABLE}" in res.output

    allowed = _estimate(mirrored, "--env-allow", VARIABLE)
    assert allowed["missing"] == 0 and allowed["objects"] == 5 and allowed["bytes"] == 5 * 1002


def test_recipe_list_and_check_say_what_a_recipe_reads_and_whether_it_may(mirrored: Path) -> None:
    recipes = mirrored / "recipes"
    listed = CliRunner().invoke(app, ["recipe", "list", "--recipes", str(recipes)])
    line = next(x for x in listed.output.splitlines() if x.startswith("mirrored "))
    assert f"reads ${{{VARIABLE}}}" in line and f"pass --env-allow {VARIABLE}" in line, line
    checked = CliRunner().invoke(
        app, ["recipe", "check", str(recipes / "mirrored.yaml"), "--env-allow", VARIABLE]
    )
    assert checked.exit_code == 0 and "allowed and set" in checked.output, checked.output


def _option_help(command: list[str], flag: str) -> str:
    res = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    line = next((x for x in res.output.splitlines() if re.search(rf"\s{flag}\s", x)), None)
    assert line is not None, f"{' '.join(command)} has no {flag}:\n{res.output}"
    return re.sub(r"[\s│]+", " ", line.split(flag, 1)[1]).strip()


@pytest.mark.parametrize("flag", ["--env-allow", "--recipes", "--media-root", "--storage-option"])
def test_every_command_that_reads_recipes_takes_the_same_options(flag: str) -> None:
    commands = [["run"], ["catalog"], ["refresh"]]
    helps = {" ".join(c): _option_help(c, flag) for c in commands}
    assert len(set(helps.values())) == 1, helps  # one declaration: the same help everywhere
    if flag in ("--env-allow", "--recipes"):
        assert _option_help(["recipe", "list"], flag) == helps["run"]
