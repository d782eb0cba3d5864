"""The catalog: streaming scan and batch plan, duplicates across batches, licenses, sources, revision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from vlmforge.schemas.redact import redact_options
from vlmforge.tasks.catalog import scan as catalog_mod
from vlmforge.tasks.catalog.licenses import detect_license
from vlmforge.tasks.catalog.media_sources import find_media_sources
from vlmforge.tasks.catalog.recipe_fingerprints import recipe_fingerprint
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.catalog.revision import release_revision
from vlmforge.tasks.catalog.scan import scan_jsonl, scan_subset_jsonl
from vlmforge.tasks.catalog.storage_options import parse_storage_options
from vlmforge.tasks.errors import ReleaseError
from vlmforge.tasks.parse.jsonl_batch import parse_batch
from vlmforge.tasks.sample_release.expected import EXPECTED, LICENSES

LOCAL = fsspec.filesystem("file")


def _row(sid: str, text: str = "hi") -> bytes:
    messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]
    return json.dumps({"id": sid, "messages": messages}).encode()


def _naive_plan(data: bytes, batch_lines: int) -> tuple[int, tuple[int, ...]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    offsets, pos = [0], 0
    for i, line in enumerate(lines, 1):
        pos += len(line) + 1
        if i % batch_lines == 0 and min(pos, len(data)) < len(data):
            offsets.append(pos)
    if offsets[-1] != len(data):
        offsets.append(len(data))
    return len(lines), tuple(offsets)


@pytest.mark.parametrize("chunk", [7, 64, 8 * 1024 * 1024])
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n",
        b"a\nb\nc\n",
        b"a\nb\nc",
        b"a\r\nbb\r\n\r\nccc\r\n",
        b"x" * 100 + b"\n" + b"y" * 3 + b"\n" * 5 + b"z",
        b"\n".join(b"%d" % i * (i % 13) for i in range(40)) + b"\n",
    ],
)
def test_scan_plans_batches_on_line_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, data: bytes
) -> None:
    monkeypatch.setattr(catalog_mod, "CHUNK", chunk)
    p = tmp_path / "s.jsonl"
    p.write_bytes(data)
    for batch_lines in (1, 2, 3, 4, 1000):
        sha, size, rows, offsets = scan_jsonl(LOCAL, str(p), batch_lines)
        assert size == len(data)
        assert (rows, offsets) == _naive_plan(data, batch_lines), (data, batch_lines)
        # The batches cover every line exactly once, in order.
        covered = [data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
        assert b"".join(covered) == data


def test_duplicates_across_batches(tmp_path: Path) -> None:
    a, a_other, b = _row("a"), _row("a", "different"), _row("b")
    dotted, underscored = _row("x.y"), _row("x_y")  # distinct ids, one Energon key
    lines = [a, b, a, b"", b"", a_other, dotted, underscored, a + b"\r", b"{bad", b"{bad", _row("a__line6")]
    p = tmp_path / "s" / "s.jsonl"
    p.parent.mkdir()
    p.write_bytes(b"\n".join(lines) + b"\n")
    scan = scan_subset_jsonl(LOCAL, str(p), batch_lines=2, subset="s", batch_media=None)
    # Identical rows (a trailing \r ignored; blank lines are not duplicates; bad rows too are compared).
    assert scan.duplicate_rows == ((3, 1), (9, 1), (11, 10))
    # Same id, other content: kept under a distinct key that no other row uses.
    assert scan.id_conflicts == ((6, 1, "s__a__line6_2"), (8, 7, "s__x_y__line8"))
    # The batches that own those lines see them with the entry's helpers.
    (entry,) = catalog_release(str(tmp_path), batch_lines=2)
    assert entry.duplicates_in(5, 6) == {} and entry.duplicates_in(9, 10) == {9: 1}
    assert entry.conflicts_in(5, 6) == {6: (1, "s__a__line6_2")}
    start, end = entry.batch_offsets[2], entry.batch_offsets[3]  # lines 5-6
    items = parse_batch(
        p.read_bytes()[start:end], 5, duplicates=entry.duplicates_in(5, 6), conflicts=entry.conflicts_in(5, 6)
    )
    assert items[1].key == "s__a__line6_2" and items[1].id_conflict_of == 1  # type: ignore[union-attr]


def test_scan_without_subset_name_skips_the_duplicate_search(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_bytes(_row("a") + b"\n" + _row("a") + b"\n")
    scan = scan_subset_jsonl(LOCAL, str(p), 10, batch_media=None)
    assert scan.rows == 2 and scan.duplicate_rows == () and scan.id_conflicts == ()


def test_catalog_of_the_sample_release(sample_release: Path) -> None:
    entries = catalog_release(str(sample_release), batch_lines=4)
    assert [e.subset for e in entries] == sorted(EXPECTED)
    for e in entries:
        assert e.rows == len(EXPECTED[e.subset])
        assert e.license == (LICENSES[e.subset] or "unknown")
        assert e.path == f"{sample_release}/{e.subset}" and e.release == str(sample_release)
        assert e.duplicate_rows == () and e.id_conflicts == ()
        assert e.media_sources  # every sample README names its upstream
    bad = next(e for e in entries if e.subset == "bad_rows")
    assert bad.license_text == "Terms: research use only, see upstream"
    assert bad.media_sources == ("https://example.org/upstream/bad_rows",)


def test_catalog_errors_name_the_problem(tmp_path: Path, sample_release: Path) -> None:
    with pytest.raises(ReleaseError, match="is not a folder"):
        catalog_release(str(tmp_path / "missing"))
    with pytest.raises(ReleaseError, match=r"subset\(s\) nope not found .* available: bad_rows"):
        catalog_release(str(sample_release), subsets=["nope"])


# ------------------------------------------------------------------------------------------- licenses


@pytest.mark.parametrize(
    ("readme", "spdx"),
    [
        ("---\nlicense: cc-by-4.0\ntask_categories: [vqa]\n---\n# Data\n", "CC-BY-4.0"),
        ("---\nlicense:\n- cc-by-sa-4.0\n---\n# Data\nImages are MIT.\n", "CC-BY-SA-4.0"),
        ("# X\n\n## License\n\nThis dataset is released under CC BY-SA 4.0.\n", "CC-BY-SA-4.0"),
        ("# X\n\nLicense: GPL-3.0\n", "GPL-3.0"),
        ("## Licence\nDistributed under the GNU General Public License v3.\n", "GPL-3.0"),
        ("## License\nBSD 3-Clause License, see LICENSE.\n", "BSD-3-Clause"),
        ("License: Apache License, Version 2.0\n", "Apache-2.0"),
        ("## License\nhttps://creativecommons.org/licenses/by/4.0/\n", "CC-BY-4.0"),
        ("## License\nCreative Commons Attribution-ShareAlike 4.0 International\n", "CC-BY-SA-4.0"),
        ("## License\nCreative Commons Attribution-NonCommercial 4.0\n", "CC-BY-NC-4.0"),
        ("Governing terms: CDLA-Permissive-2.0 for the annotations.\n", "CDLA-Permissive-2.0"),
        ("# X\nThe MIT License applies.\n", "MIT"),
    ],
)
def test_license_is_recognised(readme: str, spdx: str) -> None:
    assert detect_license(readme) == (spdx, None)


def test_unknown_license_keeps_the_readmes_words() -> None:
    assert detect_license("# X\n\n## License\n\nResearch use only; see upstream.\n") == (
        "unknown",
        "Research use only; see upstream.",
    )
    assert detect_license("---\nlicense: other\nlicense_name: nvidia-open-data\n---\n") == (
        "unknown",
        "nvidia-open-data",
    )
    assert detect_license("# Nothing about terms here\n") == ("unknown", None)


# ------------------------------------------------------------------------------------ sources, revision


def test_media_sources_found_in_a_readme() -> None:
    readme = """# ChartQA subset
Images come from https://github.com/vis-nlp/ChartQA (see `ChartQA Dataset.zip`),
the COCO train2017 zip http://images.cocodataset.org/zips/train2017.zip, OpenImages on
https://open-images-dataset.s3.amazonaws.com/tar/train_0.tar.gz and s3://my-bucket/prefix/images/.
Also on the Hub: huggingface.co/datasets/HuggingFaceM4/ChartQA and
https://huggingface.co/datasets/lmms-lab/DocVQA/tree/main.
License: [CC BY 4.0](https://creativecommons.org/licenses/by/4.0/); paper https://arxiv.org/abs/2203.10244.
"""
    assert find_media_sources(readme) == (
        "https://github.com/vis-nlp/ChartQA",
        "http://images.cocodataset.org/zips/train2017.zip",
        "s3://open-images-dataset",
        "s3://my-bucket",
        "hf://datasets/HuggingFaceM4/ChartQA",
        "hf://datasets/lmms-lab/DocVQA",
    )


def test_release_revision(tmp_path: Path) -> None:
    assert release_revision("hf://datasets/nvidia/Nemotron-Image-Training-v3@1a2b3c") == "1a2b3c"
    assert release_revision("hf://datasets/nvidia/X@refs%2Fpr%2F9/sub") == "refs/pr/9"
    assert release_revision("hf://datasets/nvidia/X") is None
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert release_revision(f"/cache/datasets--nvidia--X/snapshots/{sha}") == sha
    assert release_revision("s3://bucket/release") is None
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text(sha + "\n")
    assert release_revision(str(tmp_path), LOCAL, str(tmp_path)) == sha
    (git / "refs" / "heads" / "main").unlink()
    (git / "packed-refs").write_text(f"# pack-refs\n{sha} refs/heads/main\n")
    assert release_revision(str(tmp_path), LOCAL, str(tmp_path)) == sha


# ----------------------------------------------------------------------------------------- options


def test_storage_options_from_the_command_line() -> None:
    opts = parse_storage_options(
        ["endpoint_url=http://127.0.0.1:9000", "anon=true", "client_kwargs.region_name=eu-west-1", "key=AKIA"]
    )
    assert opts == {
        "endpoint_url": "http://127.0.0.1:9000",
        "anon": True,
        "client_kwargs": {"region_name": "eu-west-1"},
        "key": "AKIA",
    }
    assert redact_options(opts)["key"] == "***"
    assert redact_options(opts)["endpoint_url"] == "http://127.0.0.1:9000"
    with pytest.raises(ReleaseError, match="expected key=value"):
        parse_storage_options(["endpoint_url"])


def test_recipe_fingerprint_is_stable() -> None:
    a: dict[str, Any] = {"subset": "s", "sources": [{"kind": "release_tar"}]}
    b: dict[str, Any] = {"sources": [{"kind": "release_tar"}], "subset": "s"}
    assert recipe_fingerprint(a) == recipe_fingerprint(b) != recipe_fingerprint({"subset": "t"})
