"""A real ``vlmforge run`` (CLI, the session's Prefect server, the local executor) against a hostile
loopback upstream (``tests/drip_server.py``): a status line and headers dripped one byte at a time, a
redirect whose body never ends, a redirect to another port. With ``--fetch-request-timeout 3`` every
dripping reference ends ``timeout`` with the deadline's words, no connection is held much past the
deadline (each attempt's), the cross-port redirect is refused with its reason, and the good references
are published."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from drip_server import DripServer

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
REQUEST_TIMEOUT = 3.0
HELD_BOUND = 30.0  # generous for a loaded machine; a drip never trips the 30 s socket timeout, so before
# the request deadline a connection was held until the server gave up (minutes) or the run ended
SUBSET = "hostile_up"
NAMES = ("ok.jpg", "drip-status.jpg", "drip-headers.jpg", "endless-redirect-body.jpg", "to-port.jpg")


def release(root: Path) -> Path:
    import json

    folder = root / "release" / SUBSET
    folder.mkdir(parents=True)
    rows = [
        {
            "id": f"h-{i}",
            "messages": [
                {"role": "user", "content": ["What is shown?", {"type": "image", "image": f"img/{n}"}]},
                {"role": "assistant", "content": "Noise."},
            ],
        }
        for i, n in enumerate(NAMES)
    ]
    (folder / f"{SUBSET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "release"


@pytest.fixture
def scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="vfh-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_hostile_upstream_cannot_hold_a_run(prefect_harness: None, tmp_path: Path, scratch: Path) -> None:
    from vlmforge.flows.runtime.embedded import configured_api_url

    other = DripServer()
    with DripServer(pace=0.5) as srv, other:
        srv.redirects["/to-port.jpg"] = other.url("/ok.jpg")
        recipes, out = tmp_path / "recipes", tmp_path / "out"
        recipes.mkdir()
        url = srv.url("/{name}")
        source = f'  - kind: http_files\n    allow_private: true\n    url: "{url}"\n'
        recipe = f"subset: {SUBSET}\nlicense: MIT\nsources:\n{source}"
        (recipes / f"{SUBSET}.yaml").write_text(recipe)
        env = os.environ.copy() | {
            "TMPDIR": str(scratch),
            "PYTHONUNBUFFERED": "1",
            "PREFECT_API_URL": str(configured_api_url()),
        }
        cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release(tmp_path)), "--out", str(out)]
        cmd += ["--recipes", str(recipes), "--skip-gate", "--num-cpus", "1", "--max-reject-rate", "0.9"]
        cmd += ["--executor", "local"]
        cmd += ["--fetch-request-timeout", str(REQUEST_TIMEOUT)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
        text = proc.stdout + proc.stderr
        drips = srv.conns_for("/drip-status.jpg") + srv.conns_for("/drip-headers.jpg")
        endless = srv.conns_for("/endless-redirect-body.jpg")
        held = max(c.held for c in drips + endless)
        assert not other.conns_for("/ok.jpg"), "the cross-port redirect was followed"
    assert proc.returncode in (0, 1), text[-4000:]
    assert drips and all(c.sent > 0 for c in drips)
    assert held < HELD_BOUND, f"a connection was held {held:.1f} s (request deadline {REQUEST_TIMEOUT} s)"
    from vlmforge.tasks.ops.query import run_query

    rows = {
        r["ref"]: r
        for r in run_query(str(out), "SELECT ref, fetch_status, fetch_detail FROM media").to_pylist()
    }
    for name in ("drip-status.jpg", "drip-headers.jpg"):
        row = rows[f"img/{name}"]
        assert row["fetch_status"] == "timeout" and "request deadline" in row["fetch_detail"], row
    assert rows["img/to-port.jpg"]["fetch_status"] == "source_error", rows["img/to-port.jpg"]
    assert "another host or port" in rows["img/to-port.jpg"]["fetch_detail"]
    assert rows["img/ok.jpg"]["fetch_status"] == "ok"
    assert rows["img/endless-redirect-body.jpg"]["fetch_status"] == "ok"  # the body was dropped, not read
    print(f"longest connection held: {held:.2f} s; attempts per drip: {len(drips) // 2}")
