"""Every option's default is decided once, where the option is declared (schemas/config.py): a stage
parameter of the same name has no default, or the declared one (a number through schemas/config.py's
``DEFAULT_*`` constant, not written out again); it never picks another."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from vlmforge.schemas.config import _SUBMODELS, RunConfig

REPO = Path(__file__).resolve().parents[2]
# Where stages, and the flows and commands that call them, take options as parameters.
ROOTS = ("tasks", "flows")
# Parameters that share an option's name but not its meaning: (function or class, parameter) -> what it is.
OTHER_MEANING = {
    ("build_shaped_release", "subsets"): "the subsets a generated sample release is made of",
    ("plan_release", "subsets"): "the subsets a generated sample release is made of",
}


def _declared(field: FieldInfo) -> Any:
    return field.default_factory() if field.default is PydanticUndefined else field.default  # type: ignore[call-arg,misc]


def option_defaults() -> dict[str, Any]:
    """Flat option name -> its declared default (options without one left out)."""
    out = {}
    for sub in _SUBMODELS:
        for name, field in RunConfig.model_fields[sub].annotation.model_fields.items():  # type: ignore[union-attr]
            if not field.is_required():
                out[name] = _declared(field)
    return out


def _nothing(value: Any) -> bool:
    """None, False, 0 and empty collections: "no value" / "no limit", however a function spells it."""
    return value is None or (
        isinstance(value, bool | int | float | str | tuple | list | dict | set) and not value
    )


def _keyword_defaults(tree: ast.AST) -> Iterator[tuple[str, str, ast.expr]]:
    """(function or class, parameter, default expression) of every defaulted parameter and class field."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            positional = a.posonlyargs + a.args
            pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True))
            pairs += [(arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
            for arg, default in pairs:
                yield node.name, arg.arg, default
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                    yield node.name, stmt.target.id, stmt.value


def _value(expr: ast.expr, namespace: dict[str, Any]) -> Any:
    """The value of a default expression in its module (a dataclass or pydantic field gives its default)."""
    value = eval(compile(ast.Expression(expr), "<default>", "eval"), namespace)
    if isinstance(value, dataclasses.Field):
        return value.default if value.default is not dataclasses.MISSING else value.default_factory()  # type: ignore[misc]
    if isinstance(value, FieldInfo):
        return _declared(value)
    return value


def _is_number(expr: ast.expr) -> bool:
    """A number written out (a choice's name, like ``"keep"``, may be spelled where it is the default)."""
    try:
        value = ast.literal_eval(expr)
    except ValueError:
        return False
    return isinstance(value, int | float) and not isinstance(value, bool)


def problems(rel: str, tree: ast.AST, namespace: dict[str, Any], options: dict[str, Any]) -> list[str]:
    """One line per default in ``tree`` (module ``rel``) that decides an option's default a second time."""
    bad = []
    for owner, name, expr in _keyword_defaults(tree):
        if name not in options or (owner, name) in OTHER_MEANING:
            continue
        declared, where = options[name], f"{rel}:{expr.lineno} {owner}({name}={ast.unparse(expr)})"
        if _nothing(declared):
            if not _nothing(_value(expr, namespace)):
                bad.append(f"{where}: the option's default is {declared!r}; take the value given")
        elif _is_number(expr):
            bad.append(f"{where}: restates the option's default; use schemas/config.py's DEFAULT_* or none")
        elif _value(expr, namespace) != declared:
            bad.append(f"{where}: the option's default is {declared!r}")
    return bad


def _stage_modules() -> Iterator[tuple[str, ast.AST, dict[str, Any]]]:
    """(path, syntax tree, namespace) of every module under :data:`ROOTS` with a parameter named like an
    option."""
    names = set(option_defaults())
    for root in ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text())
            if not any(name in names for _, name, _ in _keyword_defaults(tree)):
                continue
            rel = path.relative_to(REPO)
            dotted = ".".join(("vlmforge", *rel.with_suffix("").parts)).removesuffix(".__init__")
            yield str(rel), tree, vars(importlib.import_module(dotted))


def test_stages_take_each_options_default_from_its_declaration() -> None:
    options = option_defaults()
    modules = list(_stage_modules())
    assert len(modules) > 10, "few stage modules take options: the scan looks in the wrong place"
    bad = [line for rel, tree, namespace in modules for line in problems(rel, tree, namespace, options)]
    assert not bad, "defaults decided twice (schemas/config.py declares them):\n" + "\n".join(bad)


def test_a_second_default_is_caught() -> None:
    """Restating a default as a literal, or choosing another one, is each reported."""
    options = option_defaults()
    tree = ast.parse(
        "def f(*, batch_media=None, max_reject_rate=0.01, shard_max_bytes=1_000_000_000, subsets=('a',),\n"
        "      batch_lines=DEFAULT_BATCH_LINES, storage_options=None): ...\n"
    )
    found = problems("x.py", tree, {"DEFAULT_BATCH_LINES": options["batch_lines"]}, options)
    assert [line.split("(", 1)[1].split("=", 1)[0] for line in found] == [
        "batch_media",
        "max_reject_rate",
        "shard_max_bytes",
        "subsets",
    ], found
