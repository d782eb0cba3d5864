"""The project's Prefect home: where the Prefect servers vlmforge starts keep their database.

Prefect's default home, ``~/.prefect``, is one per user: every checkout's runs landed in one
``prefect.db``, ``vlmforge server`` listed them all, and the servers of concurrent runs wrote that one
SQLite file at once (``sqlite3.OperationalError: database is locked``). vlmforge's servers (a run's own,
``vlmforge server``) use, in order: ``PREFECT_HOME`` when the user set it, else ``VLMFORGE_PREFECT_HOME``,
else ``.vlmforge/prefect`` in the current folder, as git keeps ``.git``.

One server per home at a time: the server serving a home is recorded in it (:data:`RECORD`, under the
home's lock file), and a run finds it there and reports to it instead of starting a second one on the
same database. Two servers on one SQLite file are what locked it.

A fresh home starts from a copy of a migrated, empty database kept once per machine and Prefect version
(``~/.cache/vlmforge``, or ``$XDG_CACHE_HOME/vlmforge``): a first start then skips Prefect's ~90
migrations (healthy after 6.9 s instead of 29.6 s on a loaded 2-core machine; 12.2 s on an already used
home).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

HOME_ENV = "VLMFORGE_PREFECT_HOME"
PROJECT_HOME = Path(".vlmforge") / "prefect"
RECORD = "vlmforge-server.json"  # the server serving this home: {"url", "pid", "kind"}
HOLDERS = "holders"  # one file per process using a run's server (named <pid>-<start time>)
DATABASE = "prefect.db"


def prefect_home() -> Path:
    """The Prefect home of this project (absolute): ``PREFECT_HOME``, ``VLMFORGE_PREFECT_HOME`` or
    ``./.vlmforge/prefect``."""
    given = os.environ.get("PREFECT_HOME") or os.environ.get(HOME_ENV)
    return Path(given).expanduser().absolute() if given else Path.cwd() / PROJECT_HOME


def server_env(home: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's by default) for a Prefect server of ``home``: its database there, and no
    API URL of its own to report to."""
    out = dict(os.environ if env is None else env)
    out["PREFECT_HOME"] = str(home)
    out.pop("PREFECT_API_URL", None)
    return out


@contextlib.contextmanager
def home_lock(home: Path) -> Iterator[None]:
    """Exclusive for the block across processes: who serves ``home`` is decided under it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".vlmforge-server.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class ServerRecord:
    url: str  # the API URL, .../api
    pid: int  # the process that serves it (a run's server keeper, or `vlmforge server`)
    kind: str  # "run" (stops when its last holder ends) or "server" (`vlmforge server`, until Ctrl-C)


def recorded_server(home: Path) -> ServerRecord | None:
    """The server recorded as serving ``home``, if its process is alive (a stale record is removed)."""
    try:
        record = ServerRecord(**json.loads((home / RECORD).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not _pid_alive(record.pid):
        with contextlib.suppress(OSError):
            (home / RECORD).unlink()
        return None
    return record


def record_server(home: Path, record: ServerRecord) -> None:
    _write_atomic(home / RECORD, json.dumps(asdict(record)).encode())


def forget_server(home: Path, pid: int) -> None:
    """Remove the record of ``home`` if it still names process ``pid``."""
    current = _read_record_pid(home)
    if current == pid:
        with contextlib.suppress(OSError):
            (home / RECORD).unlink()


def _read_record_pid(home: Path) -> int | None:
    try:
        return int(json.loads((home / RECORD).read_text())["pid"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def add_holder(home: Path, pid: int) -> Path:
    """Record process ``pid`` as using the run's server of ``home``; returns its file."""
    import psutil

    folder = home / HOLDERS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pid}-{int(psutil.Process(pid).create_time() * 1000)}"
    path.touch()
    return path


def live_holders(home: Path) -> list[Path]:
    """The holders of ``home`` whose process still runs (the same process: pid and start time); the
    files of those gone are removed."""
    import psutil

    alive = []
    for path in (home / HOLDERS).glob("*-*"):
        pid, _, started = path.name.partition("-")
        try:
            same = int(psutil.Process(int(pid)).create_time() * 1000) == int(started)
        except (psutil.Error, ValueError):
            same = False
        if same:
            alive.append(path)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return alive


def template_path() -> Path:
    """The migrated empty database for this machine's Prefect version."""
    import prefect

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vlmforge"
    return cache / f"prefect-{prefect.__version__}-template.db"


def seed_from_template(home: Path) -> bool:
    """Whether ``home`` has no database yet; then it gets a copy of the template, when there is one."""
    if (home / DATABASE).exists():
        return False
    template = template_path()
    if template.is_file():
        with contextlib.suppress(OSError):
            _write_atomic(home / DATABASE, template.read_bytes())
    return True


def save_template(home: Path) -> None:
    """Keep ``home``'s database, just migrated by its first server, as the template (when there is none
    yet). SQLite's backup reads a consistent copy while the server runs."""
    target = template_path()
    if target.exists() or not (home / DATABASE).is_file():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    os.close(fd)
    try:
        src, dst = sqlite3.connect(home / DATABASE, timeout=30), sqlite3.connect(tmp)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        os.replace(tmp, target)
    except (OSError, sqlite3.Error):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
