"""Megatron-Bridge's own Energon data modules, from its published wheel, inside the project's venv.

Bridge 0.6.2 needs Python 3.12, megatron-core and a training stack; its package ``__init__`` files import
every model. Its Energon loader (``megatron.bridge.data.energon.task_encoder_utils``: ``ChatMLWebdataset``,
``ChatMLSample``, ``cook_chatml_sample``, the ``jpgs``/``videos`` handlers) needs only torch, megatron-energon
and webdataset, plus ``megatron.bridge.utils.safe_pickle``. So the test harness:

1. obtains the published wheel (``VLMFORGE_BRIDGE_WHEEL`` names a local copy; otherwise ``pip download`` from
   PyPI) and checks its sha256 against the published one;
2. extracts only those two source files into a temporary folder (no Bridge code is committed here);
3. installs a ``sys.meta_path`` finder that serves ``megatron.bridge`` and the packages on the way down as
   empty package shells (their ``__init__`` files are never run) and the two modules from the extracted files.
   Nothing else of ``megatron.bridge`` is importable: a new import in those modules fails by name.

Nothing is installed into the venv. :class:`BridgeUnavailable` says why Bridge could not be had (the tests
skip with that reason).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "BRIDGE_VERSION",
    "WHEEL_SHA256",
    "BridgeData",
    "BridgeUnavailable",
    "load_bridge_data",
    "obtain_wheel",
    "unload_bridge_data",
]

BRIDGE_VERSION = "0.6.2"
#: sha256 of megatron_bridge-0.6.2-py3-none-any.whl as published on PyPI.
WHEEL_SHA256 = "bcb7274ab9327167c345aa24b96b95790ce5090df1945d883bdc41065d5649e2"
WHEEL_NAME = f"megatron_bridge-{BRIDGE_VERSION}-py3-none-any.whl"

#: The leaf modules made importable, and the packages above them (served empty).
MODULES = ("megatron.bridge.data.energon.task_encoder_utils", "megatron.bridge.utils.safe_pickle")
_PACKAGES = frozenset(
    ".".join(name.split(".")[:i]) for name in MODULES for i in range(2, name.count(".") + 1)
)


class BridgeUnavailable(Exception):
    """Bridge's wheel could not be obtained or its data modules not imported (the message says which)."""


def obtain_wheel(dest: Path, *, timeout_s: float = 300.0) -> Path:
    """The published wheel: ``$VLMFORGE_BRIDGE_WHEEL`` if set, else ``pip download`` into ``dest``.
    The sha256 must be the published one (a mismatch is an error, never a skip)."""
    local = os.environ.get("VLMFORGE_BRIDGE_WHEEL")
    if local:
        wheel = Path(local)
        if not wheel.is_file():
            raise BridgeUnavailable(f"VLMFORGE_BRIDGE_WHEEL={local} is not a file")
    else:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--python-version", "3.12",
            "--only-binary=:all:", f"megatron-bridge=={BRIDGE_VERSION}", "-d", str(dest),
        ]  # fmt: skip
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BridgeUnavailable(
                f"pip download megatron-bridge=={BRIDGE_VERSION} failed: {exc!r}"
            ) from exc
        wheel = dest / WHEEL_NAME
        if done.returncode != 0 or not wheel.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise BridgeUnavailable(
                f"pip download megatron-bridge=={BRIDGE_VERSION} exited {done.returncode}: {' | '.join(tail)}"
            )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise ValueError(f"{wheel} has sha256 {digest}, not the published {WHEEL_NAME}'s {WHEEL_SHA256}")
    return wheel


def _extract(wheel: Path, dest: Path) -> dict[str, Path]:
    """The source file of each of :data:`MODULES`, extracted from ``wheel`` below ``dest``."""
    files: dict[str, Path] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in MODULES:
            member = name.replace(".", "/") + ".py"
            try:
                data = zf.read(member)
            except KeyError:
                raise BridgeUnavailable(f"{wheel.name} has no {member}") from None
            target = dest / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            files[name] = target
    return files


class _BridgeDataFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``megatron.bridge`` packages as empty shells, the extracted modules from their files, nothing else."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "megatron.bridge" and not fullname.startswith("megatron.bridge."):
            return None
        if fullname in self.files:
            return importlib.util.spec_from_file_location(fullname, self.files[fullname])
        if fullname in _PACKAGES:
            spec = importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            spec.submodule_search_locations = []  # submodules come from this finder only
            return spec
        raise ModuleNotFoundError(
            f"{fullname} is not one of the Bridge data modules this harness loads ({', '.join(MODULES)})",
            name=fullname,
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        """A package shell: its ``__init__`` (which imports every model and megatron-core) is not run."""


@dataclass(frozen=True)
class BridgeData:
    """The imported Bridge modules."""

    wheel: Path
    task_encoder_utils: ModuleType
    safe_pickle: ModuleType
    finder: _BridgeDataFinder


def load_bridge_data(wheel: Path, dest: Path) -> BridgeData:
    """Bridge's Energon data modules from ``wheel``, importable as ``megatron.bridge...`` until
    :func:`unload_bridge_data`."""
    if any(name == "megatron.bridge" or name.startswith("megatron.bridge.") for name in sys.modules):
        raise BridgeUnavailable("megatron.bridge is already imported in this interpreter")
    finder = _BridgeDataFinder(_extract(wheel, dest))
    sys.meta_path.insert(0, finder)
    try:
        tem = importlib.import_module(MODULES[0])
        sp = importlib.import_module(MODULES[1])
    except Exception as exc:
        unload_bridge_data(finder)
        raise BridgeUnavailable(f"importing {MODULES[0]} from {wheel.name} failed: {exc!r}") from exc
    for attr in ("ChatMLWebdataset", "ChatMLSample", "cook_chatml_sample"):
        if not hasattr(tem, attr):
            unload_bridge_data(finder)
            raise BridgeUnavailable(f"{MODULES[0]} of {wheel.name} has no {attr}")
    return BridgeData(wheel=wheel, task_encoder_utils=tem, safe_pickle=sp, finder=finder)


def unload_bridge_data(finder: _BridgeDataFinder) -> None:
    """Remove the finder and every ``megatron.bridge`` module it served."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)
    for name in [n for n in sys.modules if n == "megatron.bridge" or n.startswith("megatron.bridge.")]:
        del sys.modules[name]
