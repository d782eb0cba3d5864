"""``--out s3://...``: the output itself on an object store (moto's server on 127.0.0.1). A one-node run of a
small release writes the same bytes there as to a local folder (manifests, the content store, the Energon
datasets and the metadataset; the run's own records aside), a rerun writes them again unchanged, and the
output reads back from S3: the read-back (megatron-energon over a local copy) and ``vlmforge query``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import output_hashes, run_flow

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.ops.query import run_query
from vlmforge.tasks.publish import published_subsets
from vlmforge.tasks.validate import validate_output

pytestmark = pytest.mark.slow  # a service (Ray, a Prefect server or an S3 server) of its own

SUBSETS = ("photo_vqa", "multi_image")
BUCKET = "out-bucket"


@pytest.fixture(scope="module")
def s3_endpoint(moto_s3: str) -> Iterator[str]:
    # The output URL carries no options: the driver and the tasks find the endpoint the standard way
    # (AWS_ENDPOINT_URL), in this process's environment (a local Ray's workers would inherit it).
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", moto_s3)
        yield moto_s3


def test_out_on_s3_writes_the_local_runs_bytes(
    prefect_harness: None, sample_release: Path, s3_endpoint: str, tmp_path: Path
) -> None:
    import s3fs

    s3fs.S3FileSystem(endpoint_url=s3_endpoint).mkdir(BUCKET)
    local, remote = str(tmp_path / "out"), f"s3://{BUCKET}/v3/out"
    for out in (local, remote):
        summary = run_flow(RunConfig(release=str(sample_release), out=out, subsets=SUBSETS))
        assert summary.failed == [] and all(s.validation == "ok" for s in summary.subsets), summary

    want = output_hashes(local)
    assert any(k.startswith("energon/photo_vqa/") and k.endswith(".tar") for k in want)
    assert "energon/metadataset.yaml" in want and any(k.startswith("store/") for k in want)
    assert output_hashes(remote) == want
    assert not Path(BUCKET).exists()  # nothing went to a local folder named like the bucket

    # A rerun (every batch current) leaves the same bytes.
    assert run_flow(RunConfig(release=str(sample_release), out=remote, subsets=SUBSETS)).failed == []
    assert output_hashes(remote) == want

    # Read back from S3: the published subsets, energon's loader, DuckDB over the manifests.
    assert published_subsets(remote) == sorted(SUBSETS)
    assert all(r.ok for r in validate_output(remote, sample_limit=None)), validate_output(remote)
    sql = "SELECT subset, status, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL"
    assert run_query(remote, sql).to_pylist() == run_query(local, sql).to_pylist()

    # A trainer's loader straight from S3: megatron-energon through the Multi-Storage Client (msc://).
    keys = loaded_from_s3(s3_endpoint, "v3/out/energon/photo_vqa", tmp_path)
    ok = run_query(remote, "SELECT key FROM samples WHERE subset = 'photo_vqa' AND status = 'ok'")
    assert sorted(keys) == sorted(ok["key"].to_pylist()) and keys


def loaded_from_s3(endpoint: str, dataset: str, tmp_path: Path) -> list[str]:
    """Keys of every sample of ``s3://BUCKET/<dataset>`` as megatron-energon loads it with the format's
    reader, over an MSC profile for the bucket (credentials from the environment, as boto3 finds them)."""
    from conftest import energon_dataset, error_collecting_worker_config, msc_profile
    from megatron.energon import get_loader

    from vlmforge.tasks.publish.formats import get_format

    fmt = get_format("bridge")
    wc, errors = error_collecting_worker_config()
    with msc_profile(endpoint, BUCKET, tmp_path) as profile:
        ds = energon_dataset(f"msc://{profile}/{dataset}", fmt, wc)
        keys = [sample.__key__ for sample in get_loader(ds)]
    assert errors == []
    return keys
