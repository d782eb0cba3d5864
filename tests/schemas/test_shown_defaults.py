"""What a user reads as an option's default is the one default declared in schemas/config.py: the default
every ``vlmforge`` command's option declares (what ``--help`` shows), and the default README states for it
("`--batch-media` ... (default 256)")."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import typer
from pydantic import BaseModel, ValidationError
from test_option_defaults import option_defaults

from vlmforge.flows.cli import app
from vlmforge.flows.cli.options import ConfigOption, run_options
from vlmforge.schemas.config import _SUBMODELS, RunConfig

REPO = Path(__file__).resolve().parents[2]
# A flag in a code span, then within the same clause (no other code span) "default" and its value: a code
# span or a word ("`--fetch-per-host`, default 32", "`--batch-lines` lines (default 10,000)", "default
# 256 MP").
README_DEFAULT = re.compile(
    r"`(--[a-z][a-z-]*)[^`]*`[^`]{0,100}?\bdefault:?\s+(`[^`]+`|[\w.,/<>-]+(?: MP\b)?)"
)
# Command parameters named like an option that mean something else: (command path, parameter) -> what.
OTHER_MEANING: dict[tuple[str, str], str] = {}


def _owner(name: str) -> type[BaseModel]:
    """The sub-model of the run config that declares option ``name``."""
    for sub in _SUBMODELS:
        model = RunConfig.model_fields[sub].annotation
        if name in model.model_fields:  # type: ignore[union-attr]
            return model  # type: ignore[return-value]
    raise KeyError(name)


def _read_as_option(name: str, text: Any) -> Any:
    """``text`` read as option ``name``'s value would be (``1GB``, ``10,000``), or a ValueError."""
    if isinstance(text, str) and re.fullmatch(r"[\d,_.]+( MP)?", text):
        number = text.removesuffix(" MP").replace(",", "").replace("_", "")
        text = str(int(float(number) * 1_000_000)) if text.endswith(" MP") else number
    model = _owner(name)
    required = {k: "x" for k, f in model.model_fields.items() if f.is_required() and k != name}
    try:
        return getattr(model.model_validate(required | {name: text}), name)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None


def commands_of(typer_app: typer.Typer) -> Iterator[tuple[str, click.Command]]:
    """(``catalog``, ``recipe list``, ...) and the click command of every command of ``typer_app``."""

    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        subs = getattr(command, "commands", None)
        if subs is None:
            yield path, command
            return
        for name, sub in subs.items():
            yield from walk(sub, f"{path} {name}".strip())

    yield from walk(typer.main.get_command(typer_app), "")


def help_problems(commands: list[tuple[str, click.Command]], declared: dict[str, Any]) -> list[str]:
    """One line per command option whose default (as ``--help`` shows it) is not the declared one. A repeated
    flag not given (``None``) leaves the field's default, so it agrees only with an empty one."""
    bad = []
    for path, command in commands:
        for param in command.params:
            name = param.name or ""
            if name not in declared or (path, name) in OTHER_MEANING or param.required:
                continue
            want, shown = declared[name], param.default
            where = f"vlmforge {path} {'/'.join(param.opts)}: --help shows {shown!r}"
            if shown is None and getattr(param, "multiple", False):
                agrees = not want
            elif shown is None or want is None:
                agrees = shown is want
            else:
                try:
                    agrees = _read_as_option(name, shown) == want
                except ValueError as exc:
                    bad.append(f"{where}, not a value of the option ({exc})")
                    continue
            if not agrees:
                bad.append(f"{where}; schemas/config.py declares {want!r}")
    return bad


# A usage line's "[--flag value]" (a value, not a METAVAR) or "[--flag a|b|c]" (the choices, default first).
USAGE_DEFAULT = re.compile(r"\[(--[a-z][a-z-]*) ([a-z0-9][\w.|]*)\]")


def readme_defaults(text: str) -> Iterator[tuple[str, str]]:
    """(flag, stated default) for every "`--flag` ... default X" in README's text, and every usage line's
    "[--flag value]" and "[--flag default|other]"."""
    for match in README_DEFAULT.finditer(re.sub(r"\s+", " ", text)):
        yield match.group(1), match.group(2).strip("`").rstrip(",.;:)")
    for match in USAGE_DEFAULT.finditer(text):
        yield match.group(1), match.group(2).split("|")[0]


def readme_choices(text: str) -> Iterator[tuple[str, list[str]]]:
    """(flag, choices) of every usage line's "[--flag a|b|c]"."""
    for match in USAGE_DEFAULT.finditer(text):
        if "|" in match.group(2):
            yield match.group(1), match.group(2).split("|")


def readme_problems(text: str, options: dict[str, ConfigOption], declared: dict[str, Any]) -> list[str]:
    """One line per default README states for a run option that is not the declared one. Where the
    declared default is ``None`` (a meaning, like ``OUT/store``), README states what the option's help says
    it means."""
    bad = []
    for flag, stated in readme_defaults(text):
        option = options.get(flag)
        if option is None or option.name not in declared:
            continue
        want, where = declared[option.name], f"README: {flag} (default {stated})"
        if want is None:
            if stated.split()[0] not in (option.field.description or ""):
                bad.append(f"{where}; its help says: {option.field.description}")
            continue
        try:
            agrees = _read_as_option(option.name, stated) == want
        except ValueError as exc:
            bad.append(f"{where}: not a value of the option ({exc})")
            continue
        if not agrees:
            bad.append(f"{where}; schemas/config.py declares {want!r}")
    return bad


def choice_problems(text: str, options: dict[str, ConfigOption]) -> list[str]:
    """One line per usage line's "[--flag a|b]" whose choices are not the option's declared ones."""
    bad = []
    for flag, choices in readme_choices(text):
        option = options.get(flag)
        if option is None or typing.get_origin(option.field.annotation) is not typing.Literal:
            continue
        declared = [str(c) for c in typing.get_args(option.field.annotation)]
        if sorted(choices) != sorted(declared):
            bad.append(f"README: [{flag} {'|'.join(choices)}]; schemas/config.py declares {declared}")
    return bad


def _flags() -> dict[str, ConfigOption]:
    return {o.flag: o for o in run_options()}


def test_help_shows_each_options_declared_default() -> None:
    commands = list(commands_of(app))
    declared = option_defaults()
    assert sum(p.name in declared for _, c in commands for p in c.params) > 40, "the scan sees few options"
    bad = help_problems(commands, declared)
    assert not bad, "defaults --help shows that schemas/config.py does not declare:\n" + "\n".join(bad)


def test_readme_states_each_options_declared_default() -> None:
    text = (REPO / "README.md").read_text()
    flags = _flags()
    assert len([f for f, _ in readme_defaults(text) if f in flags]) >= 5, "the scan finds few README defaults"
    bad = readme_problems(text, flags, option_defaults())
    assert not bad, "defaults README states that schemas/config.py does not declare:\n" + "\n".join(bad)


def test_readme_usage_lists_each_options_declared_choices() -> None:
    text = (REPO / "README.md").read_text()
    assert len(list(readme_choices(text))) >= 5, "the scan finds few choice lists in README's usage lines"
    bad = choice_problems(text, _flags())
    assert not bad, "\n".join(bad)


def test_a_wrong_shown_default_is_caught() -> None:
    """A command option or a README sentence that says another default is reported; the spellings of the
    declared one (``1GB``, ``10,000``, a repeated flag's ``None``) are not."""

    @click.command()
    @click.option("--max-reject-rate", type=float, default=0.01)
    @click.option("--batch-media", type=int, default=None)
    @click.option("--shard-size", "shard_max_bytes", default="1GB")
    @click.option("--subset", "subsets", multiple=True, default=None)
    def probe(**_: Any) -> None: ...

    declared = option_defaults()
    found = help_problems([("probe", probe)], declared)
    assert [line.split()[2].rstrip(":") for line in found] == ["--max-reject-rate", "--batch-media"], found

    text = (
        "The gate refuses a subset over `--max-reject-rate` (default 0.01). A batch holds `--batch-lines`\n"
        "lines (default 10,000) and `--batch-media` media (default 64); shards of `--shard-size` (default\n"
        "`1GB`) in\n"
        "`--store`, default `OUT/somewhere`.\n"
        "vlmforge run [--model qwen3_vl] [--executor local|ray] [--seq-len-mode drop|truncate] [--limit N]"
    )
    found = readme_problems(text, _flags(), declared)
    assert [line.split()[1] for line in found] == [
        "--max-reject-rate",
        "--batch-media",
        "--store",
        "--model",
        "--executor",
    ], found
    assert choice_problems("[--image-format keep|jpeg] [--executor ray|local]", _flags()) == [
        "README: [--image-format keep|jpeg]; schemas/config.py declares ['keep', 'jpeg', 'webp', 'png']"
    ]
