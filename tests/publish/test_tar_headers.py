"""The hand-built tar headers equal tarfile's, and the header-only re-read accepts what tarfile writes and
refuses broken or non-file members."""

from __future__ import annotations

import io
import random
import tarfile
from pathlib import Path

import pytest

from vlmforge.tasks.publish.samples import EnergonPrepareError
from vlmforge.tasks.publish.tar import header_byte_sum, tar_members
from vlmforge.tasks.publish.tar_members import tar_header


def _tarfile_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 0, 0o644, 0, 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


def test_headers_equal_tarfile_for_edge_names_and_sizes() -> None:
    names = ["a.json", "k" * 99, "k" * 100, "k" * 101, "é" * 50 + ".b", "é" * 51, "a\udcff.x", "日本" * 30]
    sizes = [0, 1, 511, 512, 8**11 - 1, 8**11, 2**40]
    rng = random.Random(7)
    pairs = [(n, s) for n in names for s in sizes]
    alphabet = "abz_-09é日\udc80."
    pairs += [
        ("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))), rng.randint(0, 10**12))
        for _ in range(2000)
    ]
    for name, size in pairs:
        assert tar_header(name, size) == _tarfile_header(name, size), (name, size)


def _write(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_tar_members_reads_long_names_offsets_and_refuses_broken_headers(tmp_path: Path) -> None:
    path = tmp_path / "s.tar"
    long_key = "k" * 150
    _write(
        path,
        [(tarfile.TarInfo("a.json"), b"{}"), (tarfile.TarInfo("a.jpgs"), b"x" * 700)]
        + [(tarfile.TarInfo(f"{long_key}.json"), b"[]")],
    )
    with tarfile.open(path) as tar:  # tarfile's own reading is the verdict
        theirs = [(m.name, m.offset, m.offset_data, m.size) for m in tar]
    assert [tuple(m) for m in tar_members(path)] == theirs
    assert theirs[2][0] == f"{long_key}.json" and theirs[2][1] < theirs[2][2] - 512  # a ././@LongLink first
    data = bytearray(path.read_bytes())
    data[1024 + 3] ^= 1  # a byte of the second member's header: its checksum no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(EnergonPrepareError, match="broken tar header at byte 1024"):
        list(tar_members(path))


def test_tar_members_refuses_a_non_file_member(tmp_path: Path) -> None:
    path = tmp_path / "d.tar"
    folder = tarfile.TarInfo("a.dir")
    folder.type = tarfile.DIRTYPE
    _write(path, [(tarfile.TarInfo("a.json"), b"{}"), (folder, b"")])
    with pytest.raises(EnergonPrepareError, match="non-file member"):
        list(tar_members(path))


def test_tar_members_agree_with_tarfile_across_read_windows(tmp_path: Path) -> None:
    """Headers are parsed from 64 KiB read windows: members that straddle a window's end, long names whose
    ``././@LongLink`` data starts in one window and ends in the next, and members larger than a window all
    read as tarfile reads them."""
    rng = random.Random(7)
    # the first window is [0, 65536): a long name's header at 64,512, its 701-byte name data from 65,024
    members = [(tarfile.TarInfo("a.bin"), bytes(64_000)), (tarfile.TarInfo("L" * 700 + ".json"), b"{}")]
    for i in range(400):
        name = f"{'n' * rng.choice([1, 90, 120, 700])}{i}.{rng.choice(['json', 'jpg', 'png'])}"
        size = rng.choice([0, 1, 511, 512, 513, 3000, 70_000, 200_000])
        members.append((tarfile.TarInfo(name), rng.randbytes(size)))
    path = tmp_path / "w.tar"
    _write(path, members)
    with tarfile.open(path) as tar:
        theirs = [(m.name, m.offset, m.offset_data, m.size) for m in tar]
    assert [tuple(m) for m in tar_members(path)] == theirs


def test_the_header_checksum_sum_is_the_bytes_sum() -> None:
    rng = random.Random(3)
    blocks = [bytes(512), b"\xff" * 512, b"\xff" * 256 + bytes(256)] + [
        rng.randbytes(512) for _ in range(200)
    ]
    assert all(header_byte_sum(b) == sum(b) for b in blocks)
