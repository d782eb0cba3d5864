"""A real ``vlmforge run`` (CLI, its own Prefect server, whose database is searched, DEBUG logging; the local
executor: a value's way through Ray's processes and logs is tests/reliability/test_secrets_run.py's) with
recipes that take values from the environment, against a loopback HTTP server:

- ``url: http://127.0.0.1:PORT/${PLANTED}/{name}`` with PLANTED set (and even allowed) is refused before any
  fetch, with the reason;
- ``url: ${VF_MIRROR}/{name}`` with ``--env-allow VF_MIRROR`` fetches every image, and the mirror's value
  (it holds a planted token in its path) is in no file the run writes (output folder, Prefect database,
  temp files) and not in its console output: the upstream column says ``${VF_MIRROR}/a.jpg``.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_fixture import HttpFixture
from PIL import Image
from planted_values import files_containing, short_scratch

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
SUBSET = "planted_run"


def jpeg(seed: int) -> bytes:
    im = Image.effect_noise((96, 96), 40 + seed).convert("RGB")
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def release(root: Path) -> Path:
    folder = root / "release" / SUBSET
    folder.mkdir(parents=True)
    rows = [
        {
            "id": f"p-{i}",
            "messages": [
                {
                    "role": "user",
                    "content": ["What is shown?", {"type": "image", "image": f"images/{n}.jpg"}],
                },
                {"role": "assistant", "content": "Noise."},
            ],
        }
        for i, n in enumerate(("a", "b"))
    ]
    (folder / f"{SUBSET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "release"


@pytest.fixture
def scratch() -> Iterator[Path]:
    with short_scratch("vfe-") as root:
        yield root


def run(
    tmp: Path, scratch: Path, recipe: str, env_extra: dict[str, str], *args: str
) -> tuple[int, str, Path]:
    recipes, out, console = tmp / "recipes", tmp / "out", tmp / "console.log"
    recipes.mkdir()
    (recipes / f"{SUBSET}.yaml").write_text(recipe)
    homes = {"PREFECT_HOME": scratch / "prefect", "TMPDIR": scratch / "tmp", "HOME": scratch / "home"}
    for folder in homes.values():
        folder.mkdir()
    env = os.environ.copy() | {k: str(v) for k, v in homes.items()} | env_extra
    env |= {
        "RAY_TMPDIR": str(scratch / "tmp"),
        "PREFECT_LOGGING_LEVEL": "DEBUG",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release(tmp)), "--out", str(out)]
    cmd += ["--recipes", str(recipes), "--skip-gate", "--num-cpus", "1", "--executor", "local", *args]
    with console.open("wb") as handle:
        proc = subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=RUN_TIMEOUT_S)
    return proc.returncode, console.read_text(errors="replace"), out


def recipe_text(url: str) -> str:
    source = f'  - kind: http_files\n    allow_private: true\n    url: "{url}"\n'
    return f"subset: {SUBSET}\nlicense: MIT\nsources:\n{source}"


def test_a_variable_in_a_url_path_is_refused_before_any_fetch(tmp_path: Path, scratch: Path) -> None:
    planted = f"PLANTED{secrets.token_hex(6).upper()}"
    with HttpFixture() as srv:
        url = srv.url("/${PLANTED}/{name}")
        code, text, out = run(
            tmp_path, scratch, recipe_text(url), {"PLANTED": planted}, "--env-allow", "PLANTED"
        )
        assert srv.requests() == [], "something was fetched"
    assert code != 0, text[-3000:]
    assert "never inside a URL's path" in text, text[-3000:]
    leaks = [hit for root in (tmp_path, scratch) for hit in files_containing(root, planted.encode())]
    assert leaks == [] and planted not in text, leaks


def test_an_allowed_mirror_location_is_fetched_and_masked_everywhere(tmp_path: Path, scratch: Path) -> None:
    planted = f"PLANTED{secrets.token_hex(6).upper()}"
    with HttpFixture() as srv:
        for n in ("a", "b"):
            srv.add(f"/{planted}/{n}.jpg", jpeg(ord(n)))
        mirror = srv.url(f"/{planted}")
        code, text, out = run(
            tmp_path,
            scratch,
            recipe_text("${VF_MIRROR}/{name}"),
            {"VF_MIRROR": mirror},
            "--env-allow",
            "VF_MIRROR",
        )
        fetched = [r.path for r in srv.requests() if r.complete]
    assert code == 0, text[-4000:]
    assert sorted(fetched) == [f"/{planted}/a.jpg", f"/{planted}/b.jpg"], fetched
    leaks = [hit for root in (tmp_path, scratch) for hit in files_containing(root, planted.encode())]
    assert leaks == [] and planted not in text, leaks
    from vlmforge.tasks.ops.query import run_query

    rows = run_query(str(out), "SELECT upstream, fetch_status FROM media ORDER BY upstream").to_pylist()
    assert rows == [
        {"upstream": "${VF_MIRROR}/a.jpg", "fetch_status": "ok"},
        {"upstream": "${VF_MIRROR}/b.jpg", "fetch_status": "ok"},
    ], rows
    assert any((scratch / "prefect").rglob("*.db")), "no Prefect database to search"
