"""Ray's token authentication is on wherever Ray is reachable: the infra files never disable it, every Ray
container of the KubeRay cluster reads the token from a Secret, every ``ray up`` node starts in token mode
with the token file copied to it; and the embedded runtime's token is a private file its processes find.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

INFRA = Path(__file__).resolve().parents[2] / "infra"


def _code_lines(path: Path) -> list[str]:
    return [line.split("#", 1)[0] for line in path.read_text().splitlines()]


def test_no_infra_file_disables_ray_authentication() -> None:
    for path in INFRA.iterdir():
        if path.is_file() and path.suffix != ".md":  # the docs name the setting to warn against it
            code = "\n".join(_code_lines(path))
            assert "RAY_AUTH_MODE=disabled" not in code and "value: disabled" not in code, path.name


def test_every_kuberay_container_takes_the_token_from_a_secret() -> None:
    docs = list(yaml.safe_load_all((INFRA / "raycluster.yaml").read_text()))
    cluster = next(d for d in docs if d["kind"] == "RayCluster")
    groups = [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert env["RAY_AUTH_MODE"]["value"] == "token", container["name"]
            ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "vlmforge-ray-auth", "key": "auth_token"}, container["name"]
    assert not any(d.get("kind") == "Secret" for d in docs)  # made with kubectl, never committed


def test_every_ray_up_node_starts_in_token_mode_with_the_token_file() -> None:
    config = yaml.safe_load((INFRA / "ray-up.yaml").read_text())
    for cmd in config["head_start_ray_commands"] + config["worker_start_ray_commands"]:
        if "ray start" in cmd:
            assert "RAY_AUTH_MODE=token" in cmd, cmd
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert "RAY_AUTH_MODE=token" in (INFRA / "Dockerfile").read_text()


def test_the_embedded_token_is_a_private_file_exported_to_child_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vlmforge.flows.runtime.embedded import QUIET_ENV, ray_token_path

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    path = ray_token_path()
    assert path == tmp_path / ".ray" / "auth_token"  # Ray's own default path
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(path)  # Ray's processes run with another HOME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text()) == 64
    assert ray_token_path() == path and path.read_text() == path.read_text()  # made once, then reused
    monkeypatch.setenv("RAY_AUTH_TOKEN", "given")
    assert ray_token_path() is None  # a token in the environment travels by itself
    assert QUIET_ENV["RAY_AUTH_MODE"] == "token" and QUIET_ENV["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
