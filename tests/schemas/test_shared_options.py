"""Every command that takes one of ``run``'s options takes it from the one declaration (schemas/config.py,
through flows/cli/options.py's ``config_options``): the same flag, help and default, so an option cannot
exist on one command and be missing or different on another (``--env-allow`` on ``catalog --estimate``)."""

from __future__ import annotations

from typing import Any

import click
from test_shown_defaults import commands_of

from vlmforge.flows.cli import app
from vlmforge.flows.cli.options import ConfigOption, run_options

# Command parameters named like a run option that mean something else: (command, parameter) -> what it is.
OTHER_MEANING = {
    ("plan", "seq_len"): "tokens per packed sequence of a packing plan, not the knob that drops samples",
    ("server", "num_cpus"): "the CPUs of the Ray head the server starts for deployments, not a run's",
    ("store clean", "store"): "the store to clean: by default the one OUT's last run used",
}
# Commands whose shared options are written out by hand: each is a defect to remove (command -> why left).
HAND_WRITTEN: dict[str, str] = {}  # command path -> why its options are written out by hand (none today)


def restated(commands: list[tuple[str, click.Command]], declared: dict[str, ConfigOption]) -> list[str]:
    """One line per command parameter named like a run option but not made from its declaration. ``out`` and
    ``release`` (required: what a command works on) are each command's own, described for that command."""
    bad = []
    for path, command in commands:
        for param in command.params:
            option = declared.get(param.name or "")
            if option is None or option.field.is_required():
                continue
            if (path, param.name) in OTHER_MEANING or path in HAND_WRITTEN:
                continue
            made: Any = option.parameter().annotation.__metadata__[0]
            if option.flag not in param.opts or getattr(param, "help", None) != made.help:
                bad.append(f"vlmforge {path} {'/'.join(param.opts)}: not made from schemas/config.py's field")
    return bad


def test_commands_take_runs_options_from_their_declaration() -> None:
    declared = {o.name: o for o in run_options()}
    commands = list(commands_of(app))
    shared = {path for path, c in commands for p in c.params if p.name in declared and path != "run"}
    assert {"catalog", "refresh", "recipe list", "mix"} <= shared, shared
    bad = restated(commands, declared)
    assert not bad, "options written out by hand (use config_options(only=...)):\n" + "\n".join(bad)


def test_an_option_written_by_hand_is_caught() -> None:
    @click.command()
    @click.option("--env-allow", "env_allow", multiple=True, help="variables a recipe may read")
    @click.option("--executor", default="ray")
    def probe(**_: Any) -> None: ...

    found = restated([("probe", probe)], {o.name: o for o in run_options()})
    assert [line.split()[2] for line in found] == ["--env-allow:", "--executor:"], found
