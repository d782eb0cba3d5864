"""Data Docs over http (issue 33): a real ``vlmforge server --docs OUT`` serves a run's pages and the shared
assets they refer to, refuses ``..``, lists no folder, and a run's link points at it when it serves the
output folder (the file path and how to serve it otherwise)."""

from __future__ import annotations

import http.client
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import pytest

from vlmforge.flows.docs_link import candidate_bases, docs_line, served_docs_url
from vlmforge.flows.summary import publish_quality
from vlmforge.tasks.gate import GateResult, build_data_docs, record_gate, record_run
from vlmforge.tasks.manifests import OutputLayout

RUN = "20261205T120000-abc123"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder with one run's quality results and Data Docs."""
    root = tmp_path_factory.mktemp("docs") / "my-out"
    layout = OutputLayout(str(root))
    record_run(layout, RUN, subsets=["x"], skip_gate=False)
    record_gate(layout, RUN, GateResult(subset="x", passed=True, suites={"samples": True}))
    build_data_docs(layout, RUN)
    return root


@pytest.fixture(scope="module")
def server(out: Path) -> Iterator[tuple[str, int]]:
    """``vlmforge server --docs OUT`` on free loopback ports; yields (the folder's docs URL, the UI port)."""
    ui_port = _free_port()
    env = os.environ.copy() | {"COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vlmforge.flows.cli", "server", "--port", str(ui_port), "--docs", str(out),
         "--docs-port", str(_free_port())],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    mount = None
    for line in proc.stderr:  # the docs serve before these lines are printed
        m = re.match(rf"\s+{re.escape(str(out))} -> (http://127\.0\.0\.1:\d+/[\w.-]+/)$", line.rstrip())
        if m:
            mount = m.group(1)
            break
    try:
        assert mount is not None, "vlmforge server ended without serving the docs"
        yield mount, ui_port
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        proc.stderr.close()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def _raw_get(base: str, path: str, host_header: str | None = None) -> int:
    """The status of a request whose path is sent as written (no client normalises ``..`` away)."""
    host, port = base.split("//", 1)[1].split("/", 1)[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host_header or f"{host}:{port}")
        conn.endheaders()
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_runs_pages_and_their_shared_assets_load_over_http(server: tuple[str, int], out: Path) -> None:
    mount, _ = server
    assert mount.startswith("http://127.0.0.1:") and mount.endswith("/my-out/")
    status, kind, report = _get(f"{mount}{RUN}/docs/index.html")
    assert status == 200 and kind.startswith("text/html") and b"Quality gate of run" in report
    status, _, runs = _get(mount)
    assert status == 200 and f'href="{RUN}/docs/index.html"'.encode() in runs
    page_url = f"{mount}{RUN}/docs/gx-index.html"
    status, _, page = _get(page_url)
    assert status == 200
    refs = re.findall(r'(?:href|src)="([^"#]*_assets/[^"]+)"', page.decode())
    assert {r.rsplit("/", 1)[-1] for r in refs} >= {"vlmforge-offline.css", "logo-long.png", "favicon.ico"}
    for ref in refs:
        assert ref.startswith("../../_assets/"), ref  # shared by the folder's runs, not the run's own copy
        status, kind, data = _get(urljoin(page_url, ref))
        assert status == 200 and data, ref
        if ref.endswith(".css"):
            assert kind.startswith("text/css")
    assert not (out / "quality" / RUN / "docs" / "static").exists()


def test_the_server_stays_inside_the_docs_folders(server: tuple[str, int], out: Path) -> None:
    mount, _ = server
    base = mount.rsplit("/", 2)[0]
    secret = out / "secret.txt"  # beside quality/, in the output folder: not served
    secret.write_text("no")
    (out / "quality" / "link-out").symlink_to(out)
    for path in (
        "/my-out/../secret.txt",
        "/my-out/%2e%2e/secret.txt",
        "/my-out/..%2fsecret.txt",
        f"/my-out/{RUN}/../../secret.txt",
        "/../../../etc/passwd",
        "/my-out/..\\secret.txt",
    ):
        assert _raw_get(base, path) == 403, path
    assert _raw_get(base, "/my-out/link-out/secret.txt") == 404  # a symlink out of the folder
    assert _raw_get(base, "/my-out/_assets/") == 404  # a folder without index.html: no listing
    assert _raw_get(base, "/other/x") == 404
    port = base.rsplit(":", 1)[1]
    assert _raw_get(base, f"/my-out/{RUN}/docs/index.html", host_header=f"evil.example:{port}") == 403
    assert _raw_get(base, f"/my-out/{RUN}/docs/index.html", host_header=f"localhost:{port}") == 200
    status, _, _ = _get(f"{base}/my-out/index.json")
    assert status == 200  # what is in quality/ is served (the runs' index)


def test_a_run_links_its_docs_over_http_when_the_server_serves_its_folder(
    server: tuple[str, int], out: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount, _ = server
    monkeypatch.delenv("VLMFORGE_DOCS_URL", raising=False)
    # where a run looks: beside the loopback Prefect API it reports to, then beside the default UI port
    assert candidate_bases("http://127.0.0.1:4300/api") == ["http://127.0.0.1:4301", "http://127.0.0.1:4201"]
    assert candidate_bases("https://prefect.example.com/api") == ["http://127.0.0.1:4201"]
    url = f"{mount}{RUN}/docs/index.html"
    # this server's --docs-port is not --port + 1: a run finds it through VLMFORGE_DOCS_URL
    monkeypatch.setenv("VLMFORGE_DOCS_URL", mount.rsplit("/", 2)[0])
    assert served_docs_url(str(out), RUN, None) == url
    assert docs_line(str(out), RUN, None) == f"Data Docs: {url}"
    md = publish_quality(OutputLayout(str(out)), RUN, logging.getLogger("test"), served_url=url)
    assert f"]({url})" in md and "file://" not in md
    other = tmp_path / "not-served"
    layout = OutputLayout(str(other))
    record_run(layout, RUN, subsets=["x"], skip_gate=False)
    record_gate(layout, RUN, GateResult(subset="x", passed=True, suites={"samples": True}))
    md = publish_quality(layout, RUN, logging.getLogger("test"))
    assert served_docs_url(str(other), RUN, None) is None
    assert f"vlmforge server --docs {other}" in md
    line = docs_line(str(other), RUN, None)
    assert line is not None and line.startswith(f"Data Docs: {other}/quality/{RUN}/docs/index.html; serve")


def test_a_runs_last_lines_point_where_it_can_be_seen_afterwards(
    out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a run whose Prefect server stopped with it, no dead "View at" port is the last word: where its
    records are kept and how to browse them; after a run that reported to a server, only the Data Docs
    line."""
    from vlmforge.flows.cli.run_banner import after_run_lines, prefect_line

    monkeypatch.setenv("VLMFORGE_DOCS_URL", "http://127.0.0.1:9")  # nothing serves there: the file path
    monkeypatch.setenv("PREFECT_HOME", str(out.parent / "prefect-home"))
    own = after_run_lines(str(out), RUN, None)
    assert own[0].startswith(f"Data Docs: {out}/quality/{RUN}/docs/index.html; serve them over http")
    assert own[1].startswith(
        f"Prefect: the run's records are kept in the Prefect home {out.parent}/prefect-home"
    )
    assert own[1].endswith(f"`vlmforge server --docs {out}` with PREFECT_HOME={out.parent}/prefect-home")
    assert after_run_lines(str(out), RUN, "http://127.0.0.1:4200/api") == own[:1]
    assert "it stops with the run; the run's records stay there" in prefect_line(None)


@pytest.mark.slow  # two `vlmforge server` processes: 15 s of the inner loop
def test_a_second_server_docs_adds_its_folder_to_the_running_server(
    server: tuple[str, int], tmp_path: Path
) -> None:
    """``vlmforge server --docs OUT2`` while one serves: OUT2 is added to it, one line says so, exit 0 (it
    used to start a second Prefect server that failed on the taken port)."""
    mount, ui_port = server
    base = mount.rsplit("/", 2)[0]
    second = tmp_path / "my-out"  # the running server already has a `my-out`: this one is `my-out-2`
    layout = OutputLayout(str(second))
    record_run(layout, RUN, subsets=["x"], skip_gate=False)
    build_data_docs(layout, RUN)
    docs_port = base.rsplit(":", 1)[1]
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "server", "--port", str(ui_port)]
    cmd += ["--docs", str(second), "--docs-port", docs_port]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "200"}
    )
    assert done.returncode == 0, done.stderr
    assert f"already serves Data Docs at {base}/: added to it" in done.stderr
    assert f"{second} -> {base}/my-out-2/" in done.stderr
    status, _, page = _get(f"{base}/my-out-2/")
    assert status == 200 and f'href="{RUN}/docs/index.html"'.encode() in page
    assert _get(f"{mount}{RUN}/docs/index.html")[0] == 200  # the first folder still served
    again = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=os.environ | {"COLUMNS": "200"}
    )
    assert again.returncode == 0 and "already served there" in again.stderr
