"""A Python 3.12 environment holding Megatron-Bridge 0.6.2 itself, for tests that run Bridge's real encoder.

The product's venv cannot hold it (Bridge declares Python 3.12 and megatron-core; vlmforge runs on 3.11), so
this module builds a separate venv with ``uv`` from the product venv: the packages of :data:`REQUIREMENTS`
(resolved with their dependencies: torch from PyPI, whose CUDA libraries are loaded but unused on CPU) and
of :data:`NO_DEPS` (megatron-bridge and megatron-core, whose declared dependencies are a GPU training stack
the data path does not import). It is built once and cached under ``~/.cache/vlmforge-bridge-py312/<hash>``
(``VLMFORGE_BRIDGE_ENV_CACHE`` moves it), keyed by a hash of the requirement lists and the interpreter, with
bytecode compiled at install (the machine sets ``PYTHONDONTWRITEBYTECODE``; without ``.pyc`` files the
megatron-core import takes minutes). A build goes to a temporary folder renamed into place, under a lock.

:func:`bridge_python` returns the environment's interpreter or raises :class:`BridgeEnvUnavailable` saying
why (no ``python3.12``, no ``uv``, the install failed): the tests skip with that reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["NO_DEPS", "REQUIREMENTS", "BridgeEnvUnavailable", "bridge_python", "run_in_bridge_env"]

#: Installed with their dependencies.
REQUIREMENTS = (
    "torch==2.13.0",
    "torchvision==0.28.0",
    "triton==3.7.1",
    "transformers==5.12.1",  # Bridge 0.6.2 pins <= 5.12.1
    "megatron-energon==7.4.1",
    "qwen-vl-utils==0.0.14",
    "tiktoken",  # transformers' TikTokenConverter: the HF tokenizer built from qwen.tiktoken
    "einops",
)
#: Installed without their declared dependencies (Bridge's data path imports none of the training stack).
NO_DEPS = ("megatron-bridge==0.6.2", "megatron-core==0.19.2")


class BridgeEnvUnavailable(Exception):
    """The Bridge environment could not be built (the message says why)."""


def _python312() -> str:
    """An interpreter for Python 3.12: ``$VLMFORGE_PYTHON312``, ``python3.12`` on PATH, or pyenv's."""
    candidates = [os.environ.get("VLMFORGE_PYTHON312"), shutil.which("python3.12")]
    pyenv = Path.home() / ".pyenv" / "versions"
    if pyenv.is_dir():
        candidates += [str(p / "bin" / "python3.12") for p in sorted(pyenv.glob("3.12*"))]
    for cand in candidates:
        if not cand:
            continue
        try:
            done = subprocess.run(
                [cand, "-c", "import sys; print(sys.executable); print(sys.version_info[:2] == (3, 12))"],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        lines = done.stdout.split()
        if done.returncode == 0 and len(lines) == 2 and lines[1] == "True":
            return lines[0]
    raise BridgeEnvUnavailable("no Python 3.12 interpreter (python3.12, pyenv 3.12.*, $VLMFORGE_PYTHON312)")


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.is_file() else shutil.which("uv")
    if not found:
        raise BridgeEnvUnavailable("uv is not installed (it builds the Bridge environment)")
    return found


def _cache_root() -> Path:
    return Path(os.environ.get("VLMFORGE_BRIDGE_ENV_CACHE", Path.home() / ".cache" / "vlmforge-bridge-py312"))


def _run(cmd: list[str], what: str, timeout_s: float) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BridgeEnvUnavailable(f"{what} failed: {exc!r}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise BridgeEnvUnavailable(f"{what} exited {done.returncode}: {' | '.join(tail)}")


def bridge_python(*, timeout_s: float = 1800.0) -> Path:
    """The cached environment's ``python`` (built on first use)."""
    py = _python312()
    key = hashlib.sha256(json.dumps([REQUIREMENTS, NO_DEPS, py]).encode()).hexdigest()[:16]
    root = _cache_root()
    env = root / key
    python = env / "bin" / "python"
    if (env / ".complete").is_file():
        return python
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first; then the env is there
        if (env / ".complete").is_file():
            return python
        tmp = root / f"{key}.building"
        shutil.rmtree(tmp, ignore_errors=True)
        uv = _uv()
        _run([uv, "venv", "-q", "--python", py, str(tmp)], "uv venv", 300)
        tpy = str(tmp / "bin" / "python")
        _run(
            [uv, "pip", "install", "-q", "--compile-bytecode", "-p", tpy, *REQUIREMENTS],
            "uv pip install",
            timeout_s,
        )
        _run(
            [uv, "pip", "install", "-q", "--compile-bytecode", "--no-deps", "-p", tpy, *NO_DEPS],
            "uv pip install --no-deps",
            timeout_s,
        )
        shutil.rmtree(env, ignore_errors=True)
        tmp.rename(env)  # a venv run through its bin/python is found from that path: renaming it is safe
        (env / ".complete").write_text(json.dumps({"requirements": REQUIREMENTS, "no_deps": NO_DEPS}))
    return python


def run_in_bridge_env(script: Path, args: list[str], *, timeout_s: float = 1200.0) -> str:
    """Run ``script`` with the Bridge environment's interpreter; its stdout (stderr tail on failure)."""
    python = bridge_python()
    env = {k: v for k, v in os.environ.items() if k not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    env["PYTHONNOUSERSITE"] = "1"
    done = subprocess.run(
        [str(python), str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout
