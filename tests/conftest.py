"""Shared fixtures. Everything runs on loopback with telemetry off; Prefect and Ray homes are temporary."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="vlmforge-tests-"))
# Before Prefect, Ray or Great Expectations are imported anywhere.
os.environ["PREFECT_HOME"] = str(_HOME / "prefect")
os.environ.pop("PREFECT_API_URL", None)
os.environ.pop("RAY_ADDRESS", None)
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ["AWS_DEFAULT_REGION"] = "us-east-1"

from vlmforge.flows.runtime import apply_quiet_env  # noqa: E402

apply_quiet_env()

REAL_MEDIA = Path(
    os.environ.get("VLMFORGE_REAL_MEDIA", Path(__file__).resolve().parents[2] / "shared/testdata/real-media")
)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One real Prefect API (subprocess server on loopback) for every flow test of the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def sample_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vlmforge.sample_release import build_sample_release

    return build_sample_release(tmp_path_factory.mktemp("release") / "sample").root
