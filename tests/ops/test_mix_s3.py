"""`vlmforge mix` on an ``s3://`` output (moto's server on 127.0.0.1): the same plan, yaml and ``.mix.json``
as on an identical local output, written to S3 (a ``dataset_psi<N>.yaml`` the blend needs into the remote
dataset's ``.nv-meta``), and megatron-energon loads the mix from S3 through the Multi-Storage Client, drawing
the samples it draws from the local mix. `validate`, `stats` and `query` read the same output from S3."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from conftest import error_collecting_worker_config, msc_profile, output_hashes
from published_fixture import SubsetSpec, build_out
from typer.testing import CliRunner

from vlmforge.flows.cli import energon as cli_energon
from vlmforge.flows.cli import tokens as cli_tokens
from vlmforge.tasks.manifests import OutputLayout
from vlmforge.tasks.ops.mix.output import write_mix
from vlmforge.tasks.ops.query import run_query
from vlmforge.tasks.validate import validate_output

pytestmark = pytest.mark.slow  # a service (Ray, a Prefect server or an S3 server) of its own

BUCKET = "mix-bucket"
PREFIX = "v3/out"
SPECS = [
    SubsetSpec("docvqa", 12, tokens=lambda i: 150 + (i % 5) * 25, images=0, license="CC-BY-4.0"),
    SubsetSpec("chartqa_1", 9, tokens=lambda i: 250 + (i % 3) * 50, images=1, val_every=3),
    SubsetSpec("zhwiki_1", 6, tokens=lambda i: 600, images=0, license="CC-BY-SA-4.0"),
]
#: three subsets of 3 train shards each: 6 handles fit only ``parallel_shard_iters`` 1
TIGHT = 6


@pytest.fixture(scope="module")
def outs(moto_s3: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(local, s3) outputs published alike, then stripped of ``dataset_psi1.yaml`` (as a dataset published
    before those files shipped), so a mix that needs it has to write it."""
    import s3fs

    with pytest.MonkeyPatch.context() as env:
        env.setenv("AWS_ENDPOINT_URL", moto_s3)
        s3fs.S3FileSystem(endpoint_url=moto_s3).mkdir(BUCKET)
        local = build_out(tmp_path_factory.mktemp("mix") / "out", SPECS)
        remote = build_out(f"s3://{BUCKET}/{PREFIX}", SPECS)
        for out in (local, remote):
            layout = OutputLayout(out)
            for spec in SPECS:
                layout.fs.rm(f"{layout.energon}/{spec.name}/.nv-meta/dataset_psi1.yaml")
        assert output_hashes(remote) == output_hashes(local)
        yield local, remote


def _without_path(raw: bytes) -> bytes:
    """A ``.mix.json`` with the mix's own path (the one thing that names the output) blanked."""
    path = json.loads(raw)["path"]
    assert path and path.endswith(".yaml")
    return raw.replace(json.dumps(path).encode(), b'"PATH"')


def test_mix_on_s3_writes_what_a_local_mix_writes(
    outs: tuple[str, str], moto_s3: str, tmp_path: Path
) -> None:
    local, remote = outs
    options: list[dict[str, Any]] = [
        {"name": "pilot", "weights": "docvqa=2,chartqa_*=1", "max_tokens": 2000},
        {"name": "tight", "by": "samples", "max_open_files": TIGHT},
    ]
    for kwargs in options:
        plans = [write_mix(out, **kwargs) for out in (local, remote)]
        assert plans[0].path == f"{local}/energon/{kwargs['name']}.yaml"
        assert plans[1].path == f"{remote}/energon/{kwargs['name']}.yaml"
        assert plans[1].to_dict() | {"path": None} == plans[0].to_dict() | {"path": None}
    assert {e.parallel_shard_iters for e in plans[1].entries} == {1}
    assert not Path(BUCKET).exists() and not Path("s3:").exists()  # nothing went to a local folder

    want, got = output_hashes(local), output_hashes(remote)
    for name in ("pilot", "tight"):
        sidecar = f"energon/{name}.mix.json"
        assert _without_path(_read(remote, sidecar)) == _without_path(_read(local, sidecar))
        del want[sidecar], got[sidecar]
        assert f"energon/{name}.yaml" in got
    # the yaml files are the same bytes; dataset_psi1.yaml was written back into each remote .nv-meta
    assert got == want
    assert all(f"energon/{s.name}/.nv-meta/dataset_psi1.yaml" in got for s in SPECS)
    tight = _read(remote, "energon/tight.yaml").decode()
    assert (
        "dataset_config: dataset_psi1.yaml" in tight
        and "range" in _read(remote, "energon/pilot.yaml").decode()
    )

    # megatron-energon loads the mix from S3 (msc://) and draws the samples the local mix gives
    drawn = _drawn(f"msc://{{profile}}/{PREFIX}/energon/tight.yaml", tmp_path, moto_s3)
    assert drawn == _drawn(f"{local}/energon/tight.yaml", tmp_path, None)
    assert {source for _key, source in drawn} == {s.name for s in SPECS}


def test_cli_on_s3(outs: tuple[str, str]) -> None:
    """`mix`, `validate` (the mixes' leaves and dataset_config included), `stats` and `query` on S3."""
    local, remote = outs
    app = typer.Typer(pretty_exceptions_enable=False)
    cli_energon.register(app)
    cli_tokens.register(app)
    runner = CliRunner()
    mixed = runner.invoke(app, ["mix", remote, "--name", "cli_mix", "--max-open-files", str(TIGHT)])
    assert mixed.exit_code == 0, mixed.output
    assert f"wrote {remote}/energon/cli_mix.yaml" in mixed.output
    assert "cli_mix.yaml" in "".join(OutputLayout(remote).fs.ls(OutputLayout(remote).energon))

    checked = runner.invoke(app, ["validate", remote, "--sample", "2"])
    assert checked.exit_code == 0, checked.output
    assert all(r.ok for r in validate_output(remote, sample_limit=2))

    stats = runner.invoke(app, ["stats", remote, "--json"])
    assert stats.exit_code == 0, stats.output
    assert runner.invoke(app, ["stats", remote]).exit_code == 0
    doc = json.loads(stats.output)
    assert {s["subset"] for s in doc["subsets"]} == {s.name for s in SPECS}
    assert doc["html"] == f"{remote}/reports/stats.html"
    assert OutputLayout(remote).fs.isfile(f"{OutputLayout(remote).root}/reports/stats.html")

    sql = "SELECT subset, split, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL"
    assert run_query(remote, sql).to_pylist() == run_query(local, sql).to_pylist()
    assert run_query(remote, sql, allow_external_access=True) == run_query(local, sql)


def _read(out: str, rel: str) -> bytes:
    layout = OutputLayout(out)
    data: bytes = layout.fs.cat_file(f"{layout.root}/{rel}")
    return data


def _drawn(mix: str, tmp_path: Path, endpoint: str | None, n: int = 60) -> list[tuple[str, str]]:
    """(key, source subflavor) of the first ``n`` samples megatron-energon draws from the mix's train blend
    (over an MSC profile for the bucket when ``endpoint`` is given). A weighted blend needs a repeating
    dataset, so this calls ``get_train_dataset`` rather than ``conftest.energon_dataset`` (one pass)."""
    from megatron.energon import get_loader, get_train_dataset

    from vlmforge.energon import ChatTaskEncoder

    wc, errors = error_collecting_worker_config()
    with contextlib.ExitStack() as stack:
        if endpoint is not None:  # ``mix`` names the profile as "{profile}"
            mix = mix.format(profile=stack.enter_context(msc_profile(endpoint, BUCKET, tmp_path)))
        ds = get_train_dataset(
            mix,
            worker_config=wc,
            batch_size=None,
            shuffle_buffer_size=None,
            max_samples_per_sequence=None,
            task_encoder=ChatTaskEncoder(),
        )
        drawn = [
            (sample.__key__, sample.__subflavors__["source"])
            for sample, _ in zip(get_loader(ds), range(n), strict=False)
        ]
    assert errors == [] and len(drawn) == n
    return drawn
