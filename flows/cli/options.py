"""``vlmforge run``'s options, made from the run config's fields (``schemas.config.RunConfig``): a field
with a ``description`` is a flag named ``--<field-name>`` (or its ``flag``), with the field's type, default,
choices (a ``Literal``) and help, in the help panel of its sub-model's title. Adding a knob is a field and
its use; nothing here names one."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Collection, Iterator
from typing import Annotated, Any, TypeVar

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ...schemas.config import RunConfig

__all__ = [
    "ConfigOption",
    "TrainerOption",
    "config_options",
    "run_options",
    "with_config_options",
    "with_trainer",
]

F = TypeVar("F", bound=Callable[..., Any])

#: ``--trainer``, on every command that takes the run's knobs (``run``, ``catalog --estimate``): applied by
#: :func:`with_trainer`.
TrainerOption = Annotated[
    str | None,
    typer.Option(
        help="set --model and the knobs to what this trainer's data path does (bridge-qwen2.5-vl | "
        "bridge-qwen3-vl; table in README); options given explicitly override the trainer's values",
        rich_help_panel="Model and knobs",
    ),
]


class ConfigOption:
    """One field of the run config as a CLI option."""

    def __init__(self, name: str, field: FieldInfo, panel: str | None) -> None:
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        self.name, self.field, self.panel = name, field, panel
        self.flag = str(extra.get("flag") or "--" + name.replace("_", "-"))
        self.short = extra.get("short")
        self.metavar = str(extra["metavar"]) if extra.get("metavar") else _choices_metavar(field.annotation)
        self.shown_default = extra.get("shown_default")

    @property
    def repeatable(self) -> bool:
        """Tuples and mappings are given as repeated flags (a mapping as ``key=value``)."""
        return typing.get_origin(self.field.annotation) in (tuple, dict)

    def cli_type(self) -> Any:
        if self.repeatable:
            return list[str] | None
        if self.shown_default is not None:  # read from text by the field's validator (``1GB``)
            return str
        return self.field.annotation

    def cli_default(self) -> Any:
        if self.field.is_required():
            return ...
        if self.repeatable:
            return None
        return self.shown_default if self.shown_default is not None else self.field.default

    def parameter(self) -> inspect.Parameter:
        names = [self.flag] + ([str(self.short)] if self.short else [])
        option = typer.Option(
            *names, help=self.field.description, metavar=self.metavar, rich_help_panel=self.panel
        )
        default = self.cli_default()
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if default is ... else default,
            annotation=Annotated[self.cli_type(), option],
        )


def _choices_metavar(annotation: Any) -> str | None:
    """``<a | b | c>`` for a long list of choices: a help column of 80 wraps it between choices, never inside
    one (``<processor|bridge_collate>`` was cut as ``bridge_colla te``)."""
    if typing.get_origin(annotation) is not typing.Literal:
        return None
    choices = [str(c) for c in typing.get_args(annotation)]
    return f"<{' | '.join(choices)}>" if len("|".join(choices)) > 16 else None


def run_options(skip: tuple[str, ...] = (), only: Collection[str] | None = None) -> Iterator[ConfigOption]:
    """Every described field of the run config (or those in ``only``), in the order of its sub-models."""

    def wanted(key: str) -> bool:
        return key not in skip and (only is None or key in only)

    for name, field in RunConfig.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            panel = sub.model_config.get("title")
            for key, inner in sub.model_fields.items():
                if inner.description and wanted(key):
                    yield ConfigOption(key, inner, panel)
        elif field.description and wanted(name):
            yield ConfigOption(name, field, None)


def config_options(skip: tuple[str, ...] = (), only: Collection[str] | None = None) -> Callable[[F], F]:
    """Decorate a typer command taking ``**options``: it gets one option per described config field (or per
    field named in ``only``, e.g. ``RECIPE_OPTIONS``: the same flag on every command that takes it; those in
    ``skip`` are its own parameters), after its own parameters."""

    def wrap(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)  # the module defers annotations (PEP 563)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        made = [o.parameter() for o in run_options(skip, only)]
        func.__signature__ = sig.replace(parameters=[*own, *made])  # type: ignore[attr-defined]
        return func

    return wrap


def with_config_options(options: dict[str, Any]) -> dict[str, Any]:
    """The flat config options a command got: a repeatable flag not given is left to the field's default."""
    return {k: v for k, v in options.items() if not (v is None and k in _REPEATABLE)}


_REPEATABLE = frozenset(o.name for o in run_options() if o.repeatable)


def with_trainer(ctx: typer.Context, trainer: str | None, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the ``--trainer`` preset's values for every option not given on the command line
    (or through an environment variable): an explicit flag overrides the trainer."""
    import difflib

    from ...schemas.trainers import TRAINERS
    from ...tasks.errors import UsageError

    if trainer is None:
        return options
    if trainer not in TRAINERS:
        close = difflib.get_close_matches(trainer, list(TRAINERS), n=1)
        hint = f"did you mean --trainer {close[0]}?" if close else "see the trainers table in README"
        raise UsageError(f"--trainer {trainer}: unknown trainer (known: {', '.join(TRAINERS)})", hint)
    preset = TRAINERS[trainer]
    # typer vendors click: compare the ParameterSource member by name, not by class
    unset = {k for k in preset if getattr(ctx.get_parameter_source(k), "name", "DEFAULT") == "DEFAULT"}
    return options | {k: v for k, v in preset.items() if k in unset}
