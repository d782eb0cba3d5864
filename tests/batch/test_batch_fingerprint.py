"""The batch fingerprint: a committed batch stays current exactly until an option that can change its output
changes. Every field of every RunConfig sub-model is changed in turn (to another valid value), and the batch
must be redone when, and only when, its sub-model is one of ``BATCH_INPUTS``."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from batch_release import config, make_release
from pydantic import BaseModel

from vlmforge.schemas.config import BATCH_INPUTS, BATCH_NEUTRAL, RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.batch.write import batch_is_current
from vlmforge.tasks.manifests import OutputLayout

SUBMODELS = [
    name
    for name, field in RunConfig.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
]
FIELDS = [(sub, name) for sub in SUBMODELS for name in RunConfig.model_fields[sub].annotation.model_fields]  # type: ignore[union-attr]


def test_every_sub_model_is_either_a_batch_input_or_neutral() -> None:
    assert not set(BATCH_INPUTS) & set(BATCH_NEUTRAL)
    assert set(BATCH_INPUTS) | set(BATCH_NEUTRAL) == set(RunConfig.model_fields)
    for sub in SUBMODELS:
        assert (sub in BATCH_INPUTS) != (sub in BATCH_NEUTRAL), sub


def _other(annotation: Any, current: Any) -> Any:
    """A value of ``annotation`` other than ``current`` (validated by the caller through RunConfig)."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        inner = next(a for a in args if a is not type(None))
        return _other(inner, None if current is None else current)
    if origin is Literal:
        return next(a for a in args if a != current)
    if annotation is bool:
        return not current
    if annotation is int:
        return 2 if current is None else current + 1
    if annotation is float:
        return 0.25 if not current else current / 2  # inside every bound the options have (0..1, > 0)
    if annotation is str:
        return "other" if current != "other" else "another"
    if origin is tuple:
        return (*current, "other") if current else ("other",)
    if origin is dict or annotation is dict:
        return {**(current or {}), "other": "x"}
    raise AssertionError(f"teach _other a value for {annotation!r}")


@pytest.fixture(scope="module")
def committed(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, SubsetEntry, OutputLayout]:
    root = tmp_path_factory.mktemp("fingerprint")
    entry = make_release(root)
    cfg = config(root)
    build_batch(entry, 0, BatchWork.of(cfg))
    layout = OutputLayout(cfg.out)
    assert batch_is_current(layout, entry, 0, BatchWork.of(cfg)) is not None
    return cfg, entry, layout


@pytest.mark.parametrize(("sub", "name"), FIELDS, ids=[f"{s}.{n}" for s, n in FIELDS])
def test_a_batch_is_redone_exactly_when_an_output_option_changes(
    committed: tuple[RunConfig, SubsetEntry, OutputLayout], sub: str, name: str
) -> None:
    cfg, entry, layout = committed
    model = getattr(cfg, sub)
    current = getattr(model, name)
    value = _other(type(model).model_fields[name].annotation, current)
    dump = cfg.model_dump()
    dump[sub][name] = value
    changed = RunConfig.model_validate(dump)
    assert getattr(getattr(changed, sub), name) != current, (sub, name, value)
    redone = batch_is_current(layout, entry, 0, BatchWork.of(changed)) is None
    assert redone == (sub in BATCH_INPUTS), f"{sub}.{name} = {value!r}"
