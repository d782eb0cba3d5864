"""Usage errors as one line: ``error: <what is wrong>; <hint>``, exit 2, no click/rich box, no traceback.

Every usage error of ``vlmforge`` takes this one path: the preflight checks' :class:`.preflight.UsageError`,
an unknown ``--trainer``, a run option that the config's validation refuses (:func:`usage_error_of`: each
field named by its flag) and click's own (an option click cannot convert, a missing argument, an unknown
option). :class:`OneLineErrorsGroup` (the ``cls`` of the ``vlmforge`` app) prints the line and exits with
:data:`.preflight.EXIT_USAGE`; ``VLMFORGE_DEBUG=1`` lets the project's own error through with its traceback.
"""

from __future__ import annotations

import os
from typing import Any

import typer
from pydantic import ValidationError
from rich.console import Console
from typer.core import TyperGroup

from ...tasks.errors import UsageError
from .preflight import EXIT_USAGE

_err = Console(stderr=True)


def usage_error_of(exc: ValidationError, command: str = "vlmforge run") -> UsageError:
    """A run config's validation errors as one :class:`UsageError` naming each flag and the value given."""
    from .options import run_options

    flags = {o.name: o.flag for o in run_options()}
    problems = []
    for error in exc.errors():
        names = [str(part) for part in error.get("loc", ())]
        field = names[-1] if names else ""
        flag = flags.get(field) or (f"--{field.replace('_', '-')}" if field else "the options")
        given = error.get("input")
        what = f"{flag} {given}" if isinstance(given, str | int | float) and names else flag
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        problems.append(f"{what}: {_lower_first(message)}")
    return UsageError("; ".join(problems), f"see `{command} --help`")


def say_usage_error(message: str) -> None:
    """The one line of a usage error, on stderr, as written (paths and values are not rich markup)."""
    _err.print(f"error: {_one_line(message)}", highlight=False, markup=False, soft_wrap=True)


class OneLineErrorsGroup(TyperGroup):
    """The ``vlmforge`` group: a usage error raised while a command is parsed or run is printed as one
    line and ends the process with exit 2 (``typer.Exit``, so ``CliRunner`` sees the code too)."""

    def invoke(self, ctx: Any) -> Any:
        from typer._click.exceptions import NoArgsIsHelpError
        from typer._click.exceptions import UsageError as ClickUsageError

        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise  # `vlmforge catalog` alone: its help, as asked
        except ClickUsageError as exc:
            say_usage_error(_click_message(exc))
            raise typer.Exit(EXIT_USAGE) from None
        except UsageError as exc:
            if os.environ.get("VLMFORGE_DEBUG"):
                raise
            say_usage_error(str(exc))
            raise typer.Exit(EXIT_USAGE) from None


def _click_message(exc: Any) -> str:
    """Click's message without its quotes and box, with where to read the command's options."""
    from typer._click.exceptions import BadParameter, MissingParameter

    message = exc.format_message().removeprefix("Invalid value: ")
    if isinstance(exc, BadParameter) and not isinstance(exc, MissingParameter) and exc.param is not None:
        hint = exc.param_hint or "/".join(getattr(exc.param, "opts", ()) or [exc.param.name or ""])
        message = f"{hint}: {_lower_first(exc.message.removeprefix('Value error, '))}"
    return f"{message.rstrip('.')}; see `{_command_of(exc.ctx)} --help`"


def _command_of(ctx: Any) -> str:
    """``vlmforge <command>`` as a user types it (also when started as ``python -m vlmforge.flows.cli``)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["vlmforge", *reversed(names)])


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in text.splitlines() if part.strip())
