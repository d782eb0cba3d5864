"""A credential given as a storage option reaches the workers but no output: not a file under OUT, not the
flow run's parameters or artifacts in Prefect's API, not Prefect's home."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vlmforge.schemas.config import RunConfig

pytestmark = pytest.mark.slow
SECRET = "PLANTED-sk-0a1b2c3d4e5f"


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_planted_secret_never_reaches_outputs_or_prefect(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client

    from vlmforge.flows.pipeline import run_release
    from vlmforge.flows.runtime import embedded_runtime

    cfg = RunConfig(
        release=str(sample_release),
        out=str(tmp_path / "out"),
        subsets=("photo_vqa",),
        # Local files ignore these options; the point is that they travel with the run.
        storage_options={"secret_access_key": SECRET, "client_kwargs": {"aws_session_token": SECRET}},
    )
    with embedded_runtime():
        summary = run_release(cfg)
        assert summary.failed == []
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs()
            artifacts = client.read_artifacts()
    assert runs and artifacts
    recorded = json.dumps([r.parameters for r in runs], default=str)
    assert "secret_access_key" in recorded and SECRET not in recorded  # masked, not dropped
    assert all(SECRET not in json.dumps(a.data, default=str) for a in artifacts)
    assert _files_containing(tmp_path / "out", SECRET.encode()) == []
    assert _files_containing(Path(os.environ["PREFECT_HOME"]), SECRET.encode()) == []
