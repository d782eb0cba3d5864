"""A full output volume is one clear error wherever it strikes: an OS write or energon's SQLite index."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from vlmforge.tasks.storage import OutputFullError, no_space


def _sqlite_full_error(path: Path) -> sqlite3.OperationalError:
    """SQLite's own SQLITE_FULL, raised for real: a database capped at a few pages, as a full disk caps it."""
    con = sqlite3.connect(path)
    con.execute("PRAGMA max_page_count = 4")
    con.execute("CREATE TABLE t (x BLOB)")
    try:
        with pytest.raises(sqlite3.OperationalError) as info:
            for _ in range(100):
                con.execute("INSERT INTO t VALUES (?)", (b"x" * 4096,))
        return info.value
    finally:
        con.close()


def test_sqlite_full_is_the_output_full_error(tmp_path: Path) -> None:
    exc = _sqlite_full_error(tmp_path / "index.sqlite")
    full = no_space(exc, str(tmp_path))
    assert isinstance(full, OutputFullError)
    assert "no space left on the output volume" in str(full) and str(tmp_path) in str(full)


def test_enospc_is_the_output_full_error() -> None:
    full = no_space(OSError(errno.ENOSPC, "No space left on device"), "/out/x")
    assert isinstance(full, OutputFullError) and "No space left on device" in str(full)


def test_other_errors_stay_what_they_are(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "x.sqlite")
    with pytest.raises(sqlite3.OperationalError) as info:
        con.execute("SELECT * FROM missing")
    con.close()
    assert no_space(info.value, "x") is None
    assert no_space(OSError(errno.EACCES, "Permission denied"), "x") is None
    assert no_space(ValueError("database or disk is full"), "x") is None
