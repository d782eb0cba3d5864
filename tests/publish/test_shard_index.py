"""The index the writer builds as it writes is the one megatron-energon's own prepare makes of its shards.

Energon's unmodified ``prepare_dataset`` is the verdict: over the shards the writer made (long keys that need
``././@LongLink`` headers, media parts, several shards, both splits, both sample formats) it must find the
same ``index.sqlite`` rows in the same schema and write the same ``.tar.idx``, ``.info.json`` and
``split.yaml`` bytes. A shard kept from an interrupted attempt is indexed by reading it back, so one that no
longer holds what was written is refused.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sqlite3
import stat
import tarfile
from pathlib import Path

import pytest
from megatron.energon.epathlib import EPath
from megatron.energon.flavors.webdataset.prepare import IndexSample, IndexSamplePart, WebdatasetPreparator

from vlmforge.tasks.publish import dataset as dataset_module
from vlmforge.tasks.publish.dataset import write_energon_dataset
from vlmforge.tasks.publish.journal import JOURNAL_NAME
from vlmforge.tasks.publish.prepare import indexed_keys
from vlmforge.tasks.publish.samples import EnergonPrepareError, MediaPart, ShardSample
from vlmforge.tasks.publish.shard_index import index_members
from vlmforge.tasks.publish.tar import TarMember, tar_members


def _samples(n: int) -> list[ShardSample]:
    out = []
    for i in range(n):
        key = f"s{i:04d}" + ("_" + "k" * 120 if i % 3 == 0 else "")  # every third key needs a long name
        content: list[object] = [{"type": "text", "text": f"question {i} " * (i % 7)}]
        media: list[MediaPart] = []
        for j in range(i % 3):
            content.append({"type": "image", "part": f"{j}.jpg"})
            media.append(MediaPart.from_bytes(f"{j}.jpg", bytes([i % 256]) * (100 + 37 * i + j)))
        doc = {"messages": [{"role": "user", "content": content}], "vlmforge": {"key": key}}
        out.append(ShardSample(key=key, split="val" if i % 5 == 0 else "train", json=doc, media=tuple(media)))
    return out


def _written(tmp_path: Path, sample_format: str = "bridge") -> Path:
    dest = tmp_path / "ds"
    write_energon_dataset(
        _samples(40), dest, subset="scan", shard_max_samples=7, fsync=False, sample_format=sample_format
    )
    return dest


def _sqlite(path: Path) -> dict[str, object]:
    """What a reader of ``index.sqlite`` sees: its schema, page size and every table's rows."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        schema = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name").fetchall()
        tables = [name for kind, name, _, _ in schema if kind == "table"]
        return {
            "schema": schema,
            "page_size": con.execute("PRAGMA page_size").fetchone(),
            "user_version": con.execute("PRAGMA user_version").fetchone(),
            **{t: sorted(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in tables},
        }


def _meta_files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file() and (p.name.endswith(".tar.idx") or p.name in (".info.json", "split.yaml"))
    }


@pytest.mark.parametrize("sample_format", ["bridge", "crude"])  # media in one pickled member, or one each
def test_the_index_is_the_one_energons_own_prepare_makes(tmp_path: Path, sample_format: str) -> None:
    dest = _written(tmp_path, sample_format)
    shards = list(json.loads((dest / ".nv-meta" / ".info.json").read_text())["shard_counts"])
    assert len(shards) > 4 and any(s.startswith("val-") for s in shards) and shards != sorted(shards)
    theirs = tmp_path / "energon"
    theirs.mkdir()
    for name in shards:
        shutil.copy(dest / name, theirs / name)
    WebdatasetPreparator.prepare_dataset(
        theirs,
        shards,  # shard ids are positions in this list, as in ours
        split_parts_patterns=[("train", r"train-.*"), ("val", r"val-.*")],
        shuffle_seed=None,
        workers=1,
    )
    ours_db, their_db = (
        _sqlite(dest / ".nv-meta" / "index.sqlite"),
        _sqlite(theirs / ".nv-meta" / "index.sqlite"),
    )
    assert ours_db == their_db
    media_member = "0.jpg" if sample_format == "crude" else "jpgs"
    assert any(row[2] == media_member for row in their_db["sample_parts"])  # type: ignore[attr-defined]
    assert _meta_files(dest) == _meta_files(theirs)
    assert len([n for n in _meta_files(theirs) if n.endswith(".tar.idx")]) == len(shards)


def test_index_rows_split_member_names_as_energons_scan_does(tmp_path: Path) -> None:
    """Names Energon skips (``__meta__`` members, a name without a part) and keys in folders: the rows made
    from the members are the items Energon's own tarfile scan yields for the same tar."""
    path = tmp_path / "odd.tar"
    with tarfile.open(path, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in ("__meta__/info.json", "a.json", "a.0.jpg", "noext", "sub/b.json", "sub/b.txt", "c.json"):
            data = name.encode() * 3
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    items = list(WebdatasetPreparator._preprocess_tar(path.name, {path.name: 2}, EPath(tmp_path), 50))
    shard = index_members(2, list(tar_members(path)))
    assert shard.samples == [
        (i.tar_file_id, i.sample_key, i.sample_index, i.byte_offset, i.byte_size)
        for i in items
        if isinstance(i, IndexSample)
    ]
    assert shard.parts == [
        (i.tar_file_id, i.sample_index, i.part_name, i.content_byte_offset, i.content_byte_size)
        for i in items
        if isinstance(i, IndexSamplePart)
    ]
    assert [key for _, key, *_ in shard.samples] == ["a", "sub/b", "c"]
    assert (tmp_path / "odd.tar.idx").read_bytes() == shard.offsets.tobytes()  # Energon's scan wrote it


def test_a_shard_without_samples_is_refused() -> None:
    with pytest.raises(EnergonPrepareError, match="no samples"):
        index_members(0, [TarMember("__meta__/a.json", 0, 512, 10), TarMember("noext", 1024, 1536, 3)])


def _interrupted_after_every_shard(dest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write of 40 samples interrupted once every shard is written, recorded and indexed, before the rest
    of ``.nv-meta``: its staging folder is left for the next write to resume."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(dataset_module, "write_info_and_splits", interrupted)
        with pytest.raises(KeyboardInterrupt):
            write_energon_dataset(_samples(40), dest, subset="scan", shard_max_samples=7, fsync=False)
    assert (dest.parent / f".{dest.name}.staging" / JOURNAL_NAME).is_file()


def test_a_kept_shard_that_does_not_hold_what_was_written_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed write keeps a finished shard of the interrupted one when the same samples arrive for it
    (journal, size); its index is read from the file, so a shard whose bytes changed on disk since (here: a
    sample renamed, same size) fails the publish instead of being published with the wrong keys."""
    dest, staging = tmp_path / "ds", tmp_path / ".ds.staging"
    _interrupted_after_every_shard(dest, monkeypatch)
    name = "train-scan-000000.tar"
    written = [m.name.split(".", 1)[0] for m in tar_members(staging / name)]
    keys = list(dict.fromkeys(written))
    renamed = keys[1][:-1] + ("x" if keys[1][-1] != "x" else "y")
    buf = io.BytesIO()
    with (
        tarfile.open(staging / name) as src,
        tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as out,
    ):
        for member in src:
            payload = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.startswith(keys[1] + "."):
                member.name = renamed + member.name[len(keys[1]) :]
            out.addfile(member, io.BytesIO(payload))
    assert len(buf.getvalue()) == (staging / name).stat().st_size
    (staging / name).write_bytes(buf.getvalue())
    with pytest.raises(EnergonPrepareError, match="first difference at 1"):
        write_energon_dataset(_samples(40), dest, subset="scan", shard_max_samples=7, fsync=False)
    assert not dest.exists() and not staging.exists()
    # the next attempt writes every shard afresh
    result = write_energon_dataset(_samples(40), dest, subset="scan", shard_max_samples=7, fsync=False)
    assert result.reused_shards == 0
    shards = list(json.loads((dest / ".nv-meta" / ".info.json").read_text())["shard_counts"])
    assert indexed_keys(dest, shards)[name] == keys


def test_a_resumed_shorter_write_publishes_no_shard_of_the_longer_interrupted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted attempt recorded shards for 40 samples; the input shrank to 30 before the rerun. The
    shards the journal recorded past the new input stay in the staging folder until the publish: none of
    them, nor anything else the interrupted attempt left, may be published or indexed."""
    dest, staging = tmp_path / "ds", tmp_path / ".ds.staging"
    _interrupted_after_every_shard(dest, monkeypatch)
    longer = {p.name for p in staging.glob("*.tar")}
    (staging / "train-scan-000000.tar.idx.tmp").write_bytes(b"\0" * 16)  # as a kill inside its write leaves
    result = write_energon_dataset(_samples(30), dest, subset="scan", shard_max_samples=7, fsync=False)
    shards = {s.shard for s in result.shards}
    assert 0 < result.reused_shards < len(result.shards) and longer - shards
    published = {p.name for p in dest.iterdir() if p.is_file()}
    assert published == shards | {f"{s}.idx" for s in shards} | {"vlmforge-shards.json"}
    info = json.loads((dest / ".nv-meta" / ".info.json").read_text())["shard_counts"]
    assert set(info) == shards and sum(info.values()) == 30
    assert sum(len(keys) for keys in indexed_keys(dest, list(info)).values()) == 30
