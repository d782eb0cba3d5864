"""Operations: the refresh, mix and validate flows on a real Prefect API and a Ray head process, the
``vlmforge refresh`` / ``vlmforge server`` commands, and the deployment and cluster files as their tools read
them (Prefect's parameter validation, Ray's cluster-config schema)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from vlmforge.schemas.config import RunConfig

REPO = Path(__file__).resolve().parents[2]


# --- files as their tools read them ----------------------------------------------------------------------


def test_prefect_yaml_parameters_validate_against_the_flows() -> None:
    from prefect.flows import load_flow_from_entrypoint

    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    names = set()
    for dep in doc["deployments"]:
        flow = load_flow_from_entrypoint(dep["entrypoint"])
        flow.validate_parameters(dep.get("parameters", {}))  # raises on a parameter the flow does not take
        names.add(f"{flow.name}/{dep['name']}")
        assert dep["work_pool"]["name"] == "vlmforge-local", dep["name"]
        for schedule in dep.get("schedules", []):
            assert schedule["active"] is False and schedule["timezone"] == "UTC", dep["name"]
    assert names == {
        "vlmforge-run/nemotron-v3-full",
        "vlmforge-run/nemotron-v3-subset",
        "vlmforge-run/sample-release",
        "vlmforge-refresh/nemotron-v3-nightly-refresh",
        "vlmforge-mix/nemotron-v3-mix",
        "vlmforge-validate/nemotron-v3-validate",
    }
    full = next(d for d in doc["deployments"] if d["name"] == "nemotron-v3-full")
    assert "@" in full["parameters"]["cfg"]["source"]["release"]  # a pinned revision


def test_ray_up_config_passes_rays_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    monkeypatch.setenv("HOME", str(tmp_path))
    config = prepare_config(yaml.safe_load((REPO / "infra" / "ray-up.yaml").read_text()))
    validate_config(config)
    head = " ".join(config["head_start_ray_commands"])
    assert "--include-dashboard=false" in head and "--disable-usage-stats" in head
    assert any("make setup" in c for c in config["setup_commands"])


def test_raycluster_manifest_matches_the_image() -> None:
    import ray

    docs = list(yaml.safe_load_all((REPO / "infra" / "raycluster.yaml").read_text()))
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    assert cluster["spec"]["rayVersion"] == ray.__version__
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["include-dashboard"] == "false"
    groups = [head, *cluster["spec"]["workerGroupSpecs"]]
    for group in groups:
        assert group["rayStartParams"]["disable-usage-stats"] == "true"
        for c in group["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["RAY_USAGE_STATS_ENABLED"] == "0" and env["HOME"] == "/home/ray"
            assert c["readinessProbe"]["exec"]["command"][0] == "bash"
    dockerfile = (REPO / "infra" / "Dockerfile").read_text()
    assert "/home/ray/ray_bootstrap_config.yaml" in dockerfile and "requirements.lock" in dockerfile


def test_server_command_binds_loopback_with_analytics_off() -> None:
    from typer.testing import CliRunner

    from vlmforge.flows.cli import app
    from vlmforge.flows.cli.server import server_command, server_env

    cmd = server_command(4321)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[-1] == "4321"
    env = server_env()
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false" and env["RAY_USAGE_STATS_ENABLED"] == "0"
    res = CliRunner().invoke(app, ["server", "--help"])
    assert res.exit_code == 0 and "127.0.0.1" in res.output


@pytest.mark.slow
def test_vlmforge_server_serves_the_ui_on_loopback_and_stops_with_its_command(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from vlmforge.flows.runtime.embedded import _free_port

    port = _free_port()
    env = os.environ.copy() | {"PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "server", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as r:
                    assert r.read() == b"true"
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout and proc.stdout.read()
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert b"<html" in r.read().lower()  # the UI
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/admin/settings", timeout=10) as r:
            settings = json.loads(r.read())
        assert settings["server"]["analytics_enabled"] is False
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with socket.socket() as s:  # the Prefect server it started is gone too
        assert s.connect_ex(("127.0.0.1", port)) != 0


# --- flows ----------------------------------------------------------------------------------------------

SUBSETS = ("photo_vqa", "bad_rows")


def _artifact(key: str) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    assert found, key
    return str(max(found, key=lambda a: a.created or 0).data)


@pytest.mark.slow
def test_refresh_mix_and_validate_flows(prefect_harness: None, sample_release: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vlmforge.flows.cli import app
    from vlmforge.flows.ops import mix_flow, runner_for, validate_flow
    from vlmforge.flows.pipeline import run_release
    from vlmforge.flows.runtime.embedded import embedded_runtime
    from vlmforge.tasks.errors import OutputError

    release, out = tmp_path / "release", tmp_path / "out"
    for s in SUBSETS:
        shutil.copytree(sample_release / s, release / s)
    cfg = RunConfig(
        release=str(release),
        out=str(out),
        batch_lines=4,
        max_reject_rate=0.9,
        executor="local",  # the flows' logic is the subject; the refresh reruns with the last run's options
    )
    with embedded_runtime():
        first = run_release.with_options(task_runner=runner_for(cfg))(cfg)
    assert first.failed == []
    assert (out / "energon" / "bad_rows").is_dir()

    readme = release / "photo_vqa" / "README.md"
    readme.write_text(readme.read_text() + "\nErrata: question 3 was reworded upstream.\n")
    shutil.rmtree(release / "bad_rows")
    cli = CliRunner()
    dry = cli.invoke(app, ["refresh", str(release), "--out", str(out), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "README changed" in dry.output and "removed upstream" in dry.output
    assert (out / "energon" / "bad_rows").is_dir()  # a dry run changes nothing

    res = cli.invoke(app, ["refresh", str(release), "--out", str(out), "--executor", "local"])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert not (out / "energon" / "bad_rows").exists()
    meta = (out / "energon" / "metadataset.yaml").read_text()
    assert "./photo_vqa" in meta and "./bad_rows" not in meta
    runs = sorted((out / "runs").glob("*.json"))
    assert len(runs) == 2
    rerun = RunConfig.flatten(json.loads(runs[-1].read_text())["config"])
    assert rerun["subsets"] == ["photo_vqa"]
    assert (rerun["batch_lines"], rerun["max_reject_rate"]) == (4, 0.9)  # the last run's options
    plan = _artifact("vlmforge-refresh")
    assert (
        "| photo_vqa | rerun | README changed" in plan and "| bad_rows | unpublish | removed upstream" in plan
    )

    mixed = mix_flow(str(out), "pilot", weights="photo_vqa=1")
    assert Path(mixed["path"]).is_file() and [e["subset"] for e in mixed["entries"]] == ["photo_vqa"]
    assert "| photo_vqa |" in _artifact("vlmforge-mix")

    checked = validate_flow(str(out))
    assert "photo_vqa" in checked["ok"] and checked["failed"] == []
    assert "| photo_vqa | ok |" in _artifact("vlmforge-validate")
    with pytest.raises(OutputError):
        validate_flow(str(tmp_path / "nothing-here"))


def test_refresh_parameters_mask_the_release_credentials() -> None:
    """Prefect stores and shows flow-run parameters: a refresh's credentials are masked there."""
    from vlmforge.flows.ops import refresh_release
    from vlmforge.schemas.config import StorageOptions

    options = StorageOptions(options={"secret": "PLANTED-sk-1", "client_kwargs": {"aws_session_token": "T"}})
    stored = json.dumps(
        refresh_release.serialize_parameters({"release": "r", "out": "o", "storage_options": options})
    )
    assert "PLANTED-sk-1" not in stored and '"T"' not in stored and "client_kwargs" in stored
    assert options.options["secret"] == "PLANTED-sk-1"  # the flow itself still gets the value
