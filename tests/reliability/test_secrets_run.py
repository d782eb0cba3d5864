"""A credential given as a storage option reaches the workers but nothing at rest and no log line.

A real ``vlmforge run`` (CLI, embedded Prefect server and Ray, DEBUG logging of every logger) gets secrets
under the spellings people use for fsspec options: plain keys (``key``, ``secret``, ``token``, ``password``,
``passwd``, ``auth``), an ``Authorization`` header and a vendor header under ``headers``, credentials nested
one and two levels deep under ``client_kwargs`` / ``config_kwargs``, vendor names (``x_api_sig``,
``sas_token``, ``account_key``), a session token, a list of tokens, and user info inside an otherwise harmless
``endpoint_url``. Each secret is a distinct value, so a leak names its spelling. Then every file the run
wrote is grepped: the output folder, the Prefect home (its database: flow-run parameters, logs, results),
Ray's session folders (every process's log), the temp folder and HOME the run saw, and the run's own
console output.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from planted_values import files_containing, short_scratch

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0


def _planted() -> str:
    return f"PLANTED{secrets.token_hex(6).upper()}"  # distinct per spelling; looks like no word


SPELLINGS = (
    "key",
    "secret",
    "token",
    "password",
    "passwd",
    "auth",
    "session_token",
    "x_api_sig",
    "sas_token",
    "account_key",
    "headers.Authorization",
    "headers.X-Api-Key",
    "client_kwargs.aws_session_token",
    "client_kwargs.credentials.api_key",
    "config_kwargs.proxies_config.proxy_password",
    "tokens[]",
    "endpoint_url userinfo",
)


def storage_option_args(planted: dict[str, str]) -> list[str]:
    """``--storage-option`` arguments carrying every planted secret under its spelling."""
    args = []
    for spelling, value in planted.items():
        if spelling == "headers.Authorization":
            option = "headers.Authorization=Bearer " + value
        elif spelling == "tokens[]":
            option = "tokens=" + json.dumps(["first-of-list", value])
        elif spelling == "endpoint_url userinfo":
            option = f"endpoint_url=http://vlmforge:{value}@127.0.0.1:9/"
        else:
            option = f"{spelling}={value}"
        args += ["--storage-option", option]
    return args


@pytest.fixture
def scratch() -> Iterator[Path]:
    with short_scratch("vfs-") as root:
        yield root


def test_planted_secrets_reach_no_file_database_or_log(
    sample_release: Path, tmp_path: Path, scratch: Path
) -> None:
    planted = {s: _planted() for s in SPELLINGS}
    out, console = tmp_path / "out", tmp_path / "console.log"
    homes = {"PREFECT_HOME": scratch / "prefect", "TMPDIR": scratch / "tmp", "HOME": scratch / "home"}
    for folder in homes.values():
        folder.mkdir()
    env = os.environ.copy() | {k: str(v) for k, v in homes.items()}
    env |= {
        "RAY_TMPDIR": str(scratch / "tmp"),
        "PREFECT_LOGGING_LEVEL": "DEBUG",
        "PREFECT_LOGGING_ROOT_LEVEL": "DEBUG",  # every library's DEBUG records to the console too
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PREFECT_API_URL", None)  # the run's own Prefect server, database in PREFECT_HOME
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release), "--out", str(out)]
    cmd += ["--subset", "photo_vqa", *storage_option_args(planted)]
    with console.open("wb") as handle:
        run = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=RUN_TIMEOUT_S)
    text = console.read_text(errors="replace")
    assert run.returncode == 0, text[-4000:]
    assert " DEBUG " in text or "| DEBUG" in text, "the run logged nothing at DEBUG: the log check is vacuous"
    searched = [scratch, tmp_path]  # tmp_path holds ``out`` and the console log
    leaks = {
        spelling: [hit for root in searched for hit in files_containing(root, value.encode())]
        for spelling, value in planted.items()
    }
    leaks = {k: v for k, v in leaks.items() if v}
    assert leaks == {}, f"planted secrets found at rest or in logs: {json.dumps(leaks, indent=1)}"
    # Masked, not dropped: the run record still says which options were given.
    (record,) = (out / "runs").glob("*.json")
    recorded = json.loads(record.read_text())["config"]
    options = json.dumps(recorded, default=str)
    assert all(k in options for k in ("x_api_sig", "Authorization", "aws_session_token", "passwd")), options
    # The search covered the places that matter (else it proves nothing).
    assert any((scratch / "prefect").rglob("*.db")), "no Prefect database to search"
    assert any((scratch / "tmp").rglob("session_*/logs/*worker*")), "no Ray worker log to search"
