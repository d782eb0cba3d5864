"""The layout rules of tasks/README.md, checked: every package installs, schemas/ imports nothing of ours,
no import cycle (function-level imports included), no oversized module."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("flows", "tasks", "schemas", "expectations", "catalog")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    """Dotted name (``vlmforge.tasks.media.image``) -> file, for every product module."""
    out = {"vlmforge": REPO / "__init__.py", "vlmforge.energon": REPO / "energon.py"}
    for top in PRODUCT:
        for path in (REPO / top).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(("vlmforge", *parts))] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Product modules ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {m for m in found if m in known and m != name}


def test_every_package_is_installed() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {"vlmforge"} | {
        ".".join(("vlmforge", *p.parent.relative_to(REPO).parts))
        for top in PRODUCT
        for p in (REPO / top).rglob("__init__.py")
    }
    assert listed == on_disk, {"not listed": sorted(on_disk - listed), "gone": sorted(listed - on_disk)}


def test_schemas_import_nothing_of_ours() -> None:
    mods = _modules()
    for name, path in mods.items():
        if name.startswith("vlmforge.schemas"):
            outside = {m for m in _imports(name, path, set(mods)) if not m.startswith("vlmforge.schemas")}
            assert not outside, (name, outside)


def test_no_import_cycles() -> None:
    mods = _modules()
    known = set(mods)
    graph = {name: _imports(name, path, known) for name, path in mods.items()}
    # a package's __init__ importing its own modules is not a cycle of the design; leave those edges out
    graph = {n: {m for m in deps if not n.startswith(m + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_module_is_oversized() -> None:
    big = {
        str(p.relative_to(REPO)): n
        for p in _modules().values()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, big
