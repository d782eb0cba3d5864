"""`vlmforge mix`: MetadatasetV2 blends from the manifests, loaded with real megatron-energon.

The token-share test draws samples from ``get_train_dataset(mix.yaml)`` through the project's cooker and
sums the token counts of their json parts; the file-handle test loads a 76-subset mix in a process whose
``ulimit -n`` is too low for Energon's default of 16 open shards per subset.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
import yaml
from conftest import error_collecting_worker_config
from megatron.energon import WorkerConfig, get_loader, get_train_dataset
from published_fixture import SubsetSpec, build_out, write_manifests
from typer.testing import CliRunner

from vlmforge.flows.cli.energon import register
from vlmforge.tasks.errors import ConfigError, OutputError
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.ops.mix.output import format_mix, write_mix
from vlmforge.tasks.ops.mix.plan import plan_mix
from vlmforge.tasks.ops.mix.weights import parse_count, parse_weights, resolve_weights
from vlmforge.tasks.publish.publish import publish_subset
from vlmforge.tasks.validate import validate_blend

# Three subsets with different token lengths (means 200, 300, 600 with some spread) and one more
# that the weights leave out. No images: the share test draws thousands of samples.
SPECS = [
    SubsetSpec("docvqa", 40, tokens=lambda i: 150 + (i % 5) * 25, images=0, license="CC-BY-4.0"),
    SubsetSpec("chartqa_1", 30, tokens=lambda i: 250 + (i % 3) * 50, images=0, license="GPL-3.0"),
    SubsetSpec(
        "chartqa_2", 20, tokens=lambda i: 500 + (i % 2) * 200, images=0, license="CC0-1.0", val_every=5
    ),
    SubsetSpec("zhwiki_1", 8, tokens=lambda i: 1000, images=1, license="CC-BY-SA-4.0"),
]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_out(tmp_path_factory.mktemp("mix") / "out", SPECS, shard_max_samples=8)


def _draw(mix: Path, n: int) -> dict[str, list[int]]:
    """Tokens of ``n`` samples drawn from the mix's train blend, by source subset."""
    from vlmforge.energon import ChatTaskEncoder

    wc, errors = error_collecting_worker_config()
    ds = get_train_dataset(
        str(mix),
        worker_config=wc,
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=ChatTaskEncoder(),
    )
    drawn: dict[str, list[int]] = {}
    for sample, _ in zip(get_loader(ds), range(n), strict=False):
        drawn.setdefault(sample.__subflavors__["source"], []).append(
            sample.record["vlmforge"]["total_tokens"]
        )
        assert sample.record["vlmforge"]["subset"] == sample.__subflavors__["source"]
    assert not errors
    return drawn


def test_parsers() -> None:
    assert parse_weights("docvqa=2, chartqa_*=1,plotqa") == [
        ("docvqa", 2.0),
        ("chartqa_*", 1.0),
        ("plotqa", 1.0),
    ]
    for bad in ("", "docvqa=x", "docvqa=-1", "a=1,a=2", "=3"):
        with pytest.raises(ConfigError):
            parse_weights(bad)
    assert (
        parse_count("2B") == 2_000_000_000 and parse_count("1.5k") == 1500 and parse_count("3e6") == 3_000_000
    )
    assert parse_count(10) == 10
    with pytest.raises(ConfigError, match="invalid count"):
        parse_count("lots")
    subsets = ["chartqa_1", "chartqa_2", "docvqa", "zhwiki_1"]
    # an exact name beats a glob, the first glob wins, weight 0 leaves a subset out
    assert resolve_weights(parse_weights("chartqa_*=1,chartqa_2=3,*=0.5,zhwiki_1=0"), subsets) == {
        "chartqa_1": 1.0,
        "chartqa_2": 3.0,
        "docvqa": 0.5,
    }
    with pytest.raises(ConfigError, match="'plotqa_\\*' matches no published subset"):
        resolve_weights(parse_weights("docvqa=1,plotqa_*=1"), subsets)


@pytest.mark.slow  # three Energon datasets written and mixed (6 s)
def test_three_subset_mix_honours_token_shares(out: str) -> None:
    plan = write_mix(out, name="ocr_heavy", weights="docvqa=2,chartqa_*=1", by="tokens")
    assert [e.subset for e in plan.entries] == ["chartqa_1", "chartqa_2", "docvqa"]
    assert plan.excluded == [("zhwiki_1", "not matched by --weights")]
    targets = {"docvqa": 0.5, "chartqa_1": 0.25, "chartqa_2": 0.25}
    for entry in plan.entries:
        assert entry.token_share == pytest.approx(targets[entry.subset], abs=1e-6)
    text = format_mix(plan)
    assert "docvqa" in text and "50.00" in text and "excluded zhwiki_1: not matched by --weights" in text

    mix = Path(out) / "energon" / "ocr_heavy.yaml"
    assert validate_blend(mix) == []
    doc = yaml.safe_load(mix.read_text())
    assert doc["__class__"] == "MetadatasetV2"
    assert [leaf["path"] for leaf in doc["splits"]["train"]["blend"]] == [
        "./chartqa_1",
        "./chartqa_2",
        "./docvqa",
    ]
    assert doc["splits"]["val"]["blend"] == [{"path": "./chartqa_2", "subflavors": {"source": "chartqa_2"}}]
    sidecar = json.loads((Path(out) / "energon" / "ocr_heavy.mix.json").read_text())
    assert sidecar["by"] == "tokens" and len(sidecar["entries"]) == 3

    drawn = _draw(mix, 6000)
    total = sum(sum(v) for v in drawn.values())
    shares = {subset: sum(tokens) / total for subset, tokens in drawn.items()}
    assert set(shares) == set(targets)
    for subset, target in targets.items():
        assert abs(shares[subset] - target) < 0.02, (subset, shares)
    print("token shares drawn:", {s: round(v, 4) for s, v in sorted(shares.items())})


def test_by_samples_and_license_allow(out: str) -> None:
    plan = plan_mix(out, name="open", by="samples", license_allow=["CC-BY-*", "cc0-1.0"])
    assert [e.subset for e in plan.entries] == ["chartqa_2", "docvqa", "zhwiki_1"]
    assert plan.excluded == [("chartqa_1", "license GPL-3.0 not in --license-allow")]
    assert all(e.sample_share == pytest.approx(1 / 3) for e in plan.entries)
    with pytest.raises(ConfigError, match="no subset left to mix"):
        plan_mix(out, name="none", license_allow=["MIT"])
    with pytest.raises(ConfigError, match="invalid mix name"):
        plan_mix(out, name="metadataset")


def test_max_tokens_takes_a_prefix_or_repeats(out: str) -> None:
    plan = write_mix(out, name="pilot", weights="docvqa=1,chartqa_2=1", max_tokens=4000)
    by_name = {e.subset: e for e in plan.entries}
    docvqa, chart = by_name["docvqa"], by_name["chartqa_2"]
    # docvqa has 40 samples (~8000 tokens): the first samples whose tokens fit in 2000
    tokens = [r["total_tokens"] for r in read_table(OutputLayout(out), "samples", "docvqa").to_pylist()]
    k = max(i for i in range(len(tokens) + 1) if sum(tokens[:i]) <= 2000)
    assert docvqa.used_samples == k < docvqa.samples and docvqa.used_tokens == sum(tokens[:k])
    assert docvqa.target_tokens == 2000 and docvqa.epochs == pytest.approx(2000 / sum(tokens[:k]))
    # chartqa_2 has 16 train samples (9600 tokens) > 2000 as well; all shares stay 50/50
    assert chart.used_samples < chart.samples
    assert docvqa.token_share == pytest.approx(0.5) and chart.token_share == pytest.approx(0.5)
    doc = yaml.safe_load((Path(out) / "energon" / "pilot.yaml").read_text())
    leaf = next(x for x in doc["splits"]["train"]["blend"] if x["path"] == "./docvqa")
    assert leaf["subset"] == {"range": [0, k]}
    first_keys = [r["key"] for r in read_table(OutputLayout(out), "samples", "docvqa").to_pylist()][:k]
    drawn_keys: set[str] = set()
    from vlmforge.energon import ChatTaskEncoder

    ds = get_train_dataset(
        str(Path(out) / "energon" / "pilot.yaml"),
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=ChatTaskEncoder(),
    )
    for sample, _ in zip(get_loader(ds), range(200), strict=False):
        if sample.__subflavors__["source"] == "docvqa":
            drawn_keys.add(sample.__key__)
    assert drawn_keys == set(first_keys)

    # a budget larger than the subset: everything used, repeated
    big = plan_mix(out, name="big", weights="zhwiki_1=1", max_tokens=20_000)
    assert big.entries[0].used_samples == 8 and big.entries[0].epochs == pytest.approx(2.5)


def test_manifest_and_dataset_must_agree(tmp_path: Path) -> None:
    out = build_out(tmp_path / "out", [SubsetSpec("solo", 5, images=0)])
    # a later run rewrote the manifests (e.g. its gate failed): they no longer describe the published data
    write_manifests(out, SubsetSpec("solo", 7, images=0))
    with pytest.raises(OutputError, match="the samples manifest has 0 published train samples"):
        plan_mix(out, name="x")
    publish_subset(OutputLayout(out), "solo", shard_max_bytes=10**9, shard_max_samples=10)
    assert plan_mix(out, name="x").entries[0].samples == 7


def test_cli_mix(out: str) -> None:
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(
        app,
        ["mix", out, "--name", "cli_mix", "--weights", "docvqa=3,zhwiki_1=1", "--license-allow", "CC-BY-*"],
    )
    assert result.exit_code == 0, result.output
    assert "docvqa" in result.output and "75.00" in result.output and "wrote" in result.output
    assert (Path(out) / "energon" / "cli_mix.yaml").is_file()
    bad = CliRunner().invoke(app, ["mix", out, "--name", "x", "--weights", "nope=1"])
    assert bad.exit_code != 0 and isinstance(bad.exception, ConfigError)


_LOAD_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]), hard))
    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    from vlmforge.energon import ChatTaskEncoder
    errors = []
    ds = get_train_dataset(
        sys.argv[1],
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0,
                                   global_error_handler=lambda e, s, src=None: errors.append(repr(e))),
        batch_size=None, shuffle_buffer_size=None, max_samples_per_sequence=None,
        task_encoder=ChatTaskEncoder(),
    )
    try:
        n = sum(1 for _ in zip(range(int(sys.argv[3])), get_loader(ds)))
    except OSError as exc:
        print("OSERROR", exc)
        sys.exit(3)
    print("LOADED", n, "ERRORS", len(errors), errors[:1])
    sys.exit(4 if errors else 0)
    """
)


@pytest.mark.slow
def test_76_subsets_fit_the_file_handle_budget(tmp_path: Path) -> None:
    names = [f"s{i:02d}" for i in range(76)]
    out = build_out(tmp_path / "out", [SubsetSpec(n, 4, images=0) for n in names], shard_max_samples=1)
    plan = write_mix(out, name="all76", max_open_files=200)
    assert len(plan.entries) == 76
    assert {e.parallel_shard_iters for e in plan.entries} == {1}
    assert plan.open_files_per_worker == 152
    doc = yaml.safe_load((Path(out) / "energon" / "all76.yaml").read_text())
    assert {leaf["dataset_config"] for leaf in doc["splits"]["train"]["blend"]} == {"dataset_psi1.yaml"}
    with pytest.raises(ConfigError, match="needs at least 152 open files"):
        plan_mix(out, name="tight", max_open_files=100)

    script = tmp_path / "load.py"
    script.write_text(_LOAD_SCRIPT)

    def load(yaml_name: str) -> subprocess.CompletedProcess[str]:
        mds = str(Path(out) / "energon" / yaml_name)
        return subprocess.run(
            [sys.executable, str(script), mds, "256", "1500"], capture_output=True, text=True, timeout=600
        )

    mixed = load("all76.yaml")
    assert mixed.returncode == 0, mixed.stdout + mixed.stderr[-3000:]
    assert "LOADED 1500 ERRORS 0" in mixed.stdout
    # the same 76 datasets with Energon's default of 16 open shards each run out of file handles
    default = load("metadataset.yaml")
    assert default.returncode != 0
    assert "Too many open files" in default.stdout + default.stderr
