"""The layout rules of tasks/README.md, checked: every package installs, schemas/ imports nothing of ours,
stages import only earlier stages' front doors, flows/ only front doors, no import cycle (function-level
imports included), no oversized module."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("flows", "tasks", "schemas", "expectations", "recipes")
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


#: Modules outside tasks/ that are a stage's second front door: ``vlmforge.energon`` is the publish format's
#: reading side, imported by trainers under that name, and kept out of publish's ``__init__`` so that
#: importing the stage does not load megatron-energon.
OUTER_DOORS = {"vlmforge.energon": "publish"}


def _stage(module: str) -> str | None:
    """The stage a product module belongs to."""
    from vlmforge.tasks import IMPORT_ORDER

    parts = module.split(".")
    if module in OUTER_DOORS:
        return OUTER_DOORS[module]
    return parts[2] if len(parts) > 2 and parts[1] == "tasks" and parts[2] in IMPORT_ORDER else None


def _is_shared(module: str) -> bool:
    from vlmforge.tasks import SHARED

    parts = module.split(".")
    return parts[1] == "schemas" or (parts[1] == "tasks" and len(parts) == 3 and parts[2] in SHARED)


def _import_violations(mods: dict[str, Path]) -> list[str]:
    """Imports against the stage order, one line each: importer -> imported: why."""
    from vlmforge.tasks import IMPORT_ORDER

    known = set(mods)
    bad = []
    for name, path in sorted(mods.items()):
        here = _stage(name)
        top = name.split(".")[1] if "." in name else ""
        for dep in sorted(_imports(name, path, known)):
            there = _stage(dep)
            door = f"vlmforge.tasks.{there}"
            if _is_shared(name) and there is not None:
                bad.append(f"{name} -> {dep}: a shared module imports a stage")
            elif there is None or there == here:
                continue
            elif dep != door and dep not in OUTER_DOORS:
                bad.append(f"{name} -> {dep}: past the front door {door}")
            elif here is not None and IMPORT_ORDER.index(there) > IMPORT_ORDER.index(here):
                bad.append(f"{name} -> {dep}: {there} comes after {here}")
            elif here is None and top not in ("flows", "tasks"):
                bad.append(f"{name} -> {dep}: only flows/ and stages import stages")
    return bad


def test_stages_import_earlier_front_doors_only() -> None:
    bad = _import_violations(_modules())
    assert not bad, "\n".join(bad)


def test_both_stage_orders_name_every_stage_package() -> None:
    """tasks/__init__.py's data order (STAGES) and import order (IMPORT_ORDER) list the same stages, each
    once: every package of tasks/, so a new stage is placed in both."""
    from vlmforge.tasks import IMPORT_ORDER, STAGES

    packages = {p.parent.name for p in (REPO / "tasks").glob("*/__init__.py")}
    assert sorted(STAGES) == sorted(IMPORT_ORDER) == sorted(packages)


@pytest.mark.parametrize(
    ("module", "line", "why"),
    [
        (
            "vlmforge.tasks.catalog.probe",
            "from ..publish import publish_dataset",
            "publish comes after catalog",
        ),
        ("vlmforge.tasks.batch.probe", "from ..parse.lines import split_lines", "past the front door"),
        ("vlmforge.tasks.gate.probe", "from ...energon import ChatSample", "publish comes after gate"),
        ("vlmforge.flows.probe", "from ..tasks.media.image import process_image", "past the front door"),
        ("vlmforge.tasks.storage", "from .media import process_image", "a shared module imports a stage"),
        (
            "vlmforge.schemas.probe",
            "from ..tasks.parse import parse_batch",
            "a shared module imports a stage",
        ),
    ],
)
def test_the_order_check_sees_a_violation(tmp_path: Path, module: str, line: str, why: str) -> None:
    """The check above fails on each kind of import against the order."""
    probe = tmp_path / "probe.py"
    probe.write_text(line + "\n")
    bad = _import_violations(_modules() | {module: probe})
    assert [v for v in bad if v.startswith(module + " ")] and why in " ".join(bad), bad


# flows/ has three rooms: the command line uses the flows and the runtime, the flows use the runtime, the
# runtime (Ray, Prefect, locks, Ctrl-C, progress events) uses neither.
ROOMS = {"vlmforge.flows.cli": 2, "vlmforge.flows.runtime": 0}
MAX_FLOWS_TOP = 15


def _room(module: str) -> int | None:
    """2: the command line, 1: the flows, 0: the runtime, None: not in flows/."""
    for prefix, rank in ROOMS.items():
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 1 if module == "vlmforge.flows" or module.startswith("vlmforge.flows.") else None


def test_flows_rooms_import_downward_only() -> None:
    mods = _modules()
    known = set(mods)
    upward = []
    for name, path in mods.items():
        rank = _room(name)
        if rank is None:
            continue
        for dep in _imports(name, path, known):
            dep_rank = _room(dep)
            if dep_rank is not None and dep_rank > rank and dep != "vlmforge.flows":
                upward.append(f"{name} -> {dep}")
    assert not upward, upward


def test_flows_holds_few_modules_at_its_top() -> None:
    top = sorted(p.name for p in (REPO / "flows").glob("*.py"))
    assert len(top) <= MAX_FLOWS_TOP, top
    assert (REPO / "flows" / "cli" / "__init__.py").exists() and (REPO / "flows" / "runtime").is_dir()


# Every stage's front door is held to "only what is used" (a stage could be listed here while its door is
# being reshaped).
WIDE_DOORS: tuple[str, ...] = ()


def _users() -> dict[str, Path]:
    """Every module that may import a front door: the product's, the tests' and the benchmarks'."""
    out = _modules()
    for top in ("tests", "benchmarks"):
        for path in (REPO / top).rglob("*.py"):
            out[".".join((top, *path.relative_to(REPO).with_suffix("").parts[1:]))] = path
    return out


def _door_names(path: Path) -> set[str]:
    """The names a front door offers: what it imports or defines at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def _imported_from(door: str, users: dict[str, Path]) -> set[str]:
    """Names modules outside ``door``'s package import from ``door`` itself."""
    found: set[str] = set()
    for name, path in users.items():
        if name == door or name.startswith(door + "."):
            continue
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = node.module or ""
            if node.level:
                base = package.split(".")
                target = ".".join([*base[: len(base) - node.level + 1], *target.split(".")]).rstrip(".")
            if target == door:
                found |= {a.name for a in node.names}
    return found


def unused_door_names(stages: tuple[str, ...], users: dict[str, Path]) -> list[str]:
    """One line per name a stage's front door offers that no module outside the stage imports from it, or
    that is underscored (private to its module)."""
    bad = []
    for stage in stages:
        door = f"vlmforge.tasks.{stage}"
        offered = _door_names(REPO / "tasks" / stage / "__init__.py")
        used = _imported_from(door, users)
        bad += [f"{door}: {n} is private" for n in sorted(offered) if n.startswith("_")]
        bad += [f"{door}: {n} is imported by nothing outside {stage}" for n in sorted(offered - used)]
    return bad


def test_front_doors_offer_only_what_other_stages_use() -> None:
    from vlmforge.tasks import IMPORT_ORDER

    assert set(WIDE_DOORS) <= set(IMPORT_ORDER)
    bad = unused_door_names(tuple(s for s in IMPORT_ORDER if s not in WIDE_DOORS), _users())
    assert not bad, "\n".join(bad)


def test_an_unused_front_door_name_is_caught(tmp_path: Path) -> None:
    """A name only the stage itself uses, and a private one, are each reported; one flows/ imports is not."""
    user = tmp_path / "user.py"
    user.write_text("from ..tasks.ops import connect\n")
    users = {n: p for n, p in _users().items() if not n.startswith(("vlmforge.flows", "tests", "benchmarks"))}
    users |= {"vlmforge.flows.user": user}
    bad = unused_door_names(("ops",), users)
    assert not any(": connect " in line for line in bad), bad
    assert any(": render " in line for line in bad), bad

    door = tmp_path / "door.py"
    door.write_text("from .query import _private\n")
    assert "_private" in _door_names(door)
