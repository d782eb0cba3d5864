"""The whole flow with the release *and* the media store on S3 (moto's server on 127.0.0.1), the way
workers on several machines share them: Ray workers read the JSONL and write media objects over s3://, the
shards are built from the store and load back through megatron-energon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_flow

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.validate import validate_subset

pytestmark = pytest.mark.slow
SUBSETS = ("photo_vqa", "video_qa")


@pytest.fixture(scope="module")
def s3_endpoint(moto_s3: str) -> Iterator[str]:
    endpoint = moto_s3
    # The store URL carries no options: the tasks find the endpoint the standard way (AWS_ENDPOINT_URL),
    # in this process's environment (the local executor's threads; a local Ray's workers inherit it).
    with pytest.MonkeyPatch.context() as env:  # module-scoped: pytest's own undo, not the function fixture
        env.setenv("AWS_ENDPOINT_URL", endpoint)
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
        yield endpoint


def test_release_and_store_on_s3(
    prefect_harness: None, sample_release: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint)
    fs.mkdir("release-bucket")
    fs.mkdir("store-bucket")
    for subset in SUBSETS:
        fs.put(str(sample_release / subset), f"release-bucket/v3/{subset}", recursive=True)
    cfg = RunConfig(
        release="s3://release-bucket/v3",
        storage_options={"endpoint_url": s3_endpoint},
        store="s3://store-bucket/media",
        out=str(tmp_path / "out"),
    )
    summary = run_flow(cfg)
    assert summary.failed == []
    assert all(s.validation == "ok" for s in summary.subsets)
    assert not (tmp_path / "out" / "store").exists()  # every media object went to the shared store
    layout = OutputLayout(cfg.out)
    stored: set[Any] = set()
    for subset in SUBSETS:
        media = read_table(layout, "media", subset).to_pylist()
        assert media and all(m["status"] == "ok" for m in media)
        stored |= {m["out_sha256"] for m in media}
        assert validate_subset(cfg.out, subset).ok
    fs.invalidate_cache()
    names = {p.rsplit("/", 1)[-1] for p in fs.find("store-bucket/media")}
    assert stored <= names
