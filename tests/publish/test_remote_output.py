"""The publish stage on an ``s3://`` output (moto's server on 127.0.0.1), without a run around it: a subset
published, republished smaller, read back and unpublished writes and leaves on S3 exactly what the same
steps leave in a local folder, and no local working copy stays behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import output_hashes
from published_fixture import SubsetSpec, write_manifests

from vlmforge.tasks.catalog import unpublish_subset
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.publish import published_subsets
from vlmforge.tasks.publish.publish import publish_metadataset, publish_subset
from vlmforge.tasks.publish.remote_copy import local_energon
from vlmforge.tasks.validate import validate_output

pytestmark = pytest.mark.slow  # a service (Ray, a Prefect server or an S3 server) of its own

BUCKET = "publish-bucket"


@pytest.fixture(scope="module")
def s3_out(moto_s3: str) -> Iterator[str]:
    import s3fs

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", moto_s3)
        s3fs.S3FileSystem(endpoint_url=moto_s3).mkdir(BUCKET)
        yield f"s3://{BUCKET}/v3/out"


def publish(out: str, specs: list[SubsetSpec]) -> None:
    for spec in specs:
        write_manifests(out, spec)
        publish_subset(OutputLayout(out), spec.name, shard_max_bytes=10**9, shard_max_samples=4)
    publish_metadataset(OutputLayout(out))


def test_publish_to_s3_leaves_what_a_local_publish_leaves(s3_out: str, tmp_path: Path) -> None:
    local = str(tmp_path / "out")
    specs = [SubsetSpec("photos", 9, val_every=3), SubsetSpec("charts", 3)]
    for out in (local, s3_out):
        publish(out, specs)
    want = output_hashes(local)
    assert sum(k.startswith("energon/photos/") and k.endswith(".tar") for k in want) == 3
    assert output_hashes(s3_out) == want
    assert published_subsets(s3_out) == ["charts", "photos"]
    assert all(r.ok for r in validate_output(s3_out, sample_limit=None))
    assert not any(local_energon(OutputLayout(s3_out)).glob("*/*"))  # the working copies went

    # Republished smaller: the shard the new version no longer has is deleted from S3 too.
    smaller = [SubsetSpec("photos", 5, val_every=3)]
    for out in (local, s3_out):
        for table in ("samples", "media", "records"):
            OutputLayout(out).fs.rm(f"{OutputLayout(out).manifests}/{table}/subset=photos", recursive=True)
        publish(out, smaller)
    want = output_hashes(local)
    assert sum(k.startswith("energon/photos/") and k.endswith(".tar") for k in want) == 2
    assert output_hashes(s3_out) == want

    # Unpublished: gone from the listing of published subsets and from the metadataset.
    for out in (local, s3_out):
        assert unpublish_subset(OutputLayout(out), "charts")
        publish_metadataset(OutputLayout(out))
    assert published_subsets(s3_out) == published_subsets(local) == ["photos"]
    assert output_hashes(s3_out) == output_hashes(local)
