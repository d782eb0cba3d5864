"""A recipe source's ``match`` regex, run with a budget: the ``regex`` engine with a time limit per search
and a cap on the length of the reference searched.

A recipe is written by someone else, and a pattern such as ``(x+x+)+y`` backtracks exponentially: against a
long reference one search outlives any batch deadline (it runs in the batch's own thread, before a fetch
starts). Every search here stops after :data:`MATCH_BUDGET_S` seconds, and a reference longer than
:data:`MAX_MATCH_SUBJECT` characters is not searched at all; either way :class:`MatchBudgetError` says why,
and the fetch stage makes it that reference's reject (``match_budget``), never a hang.
"""

from __future__ import annotations

from typing import Any, Final

import regex

MATCH_BUDGET_S: Final = 0.25  # a sane pattern on a path takes microseconds: 10^4 x that is no false alarm
MAX_MATCH_SUBJECT: Final = 4096  # characters of a reference (PATH_MAX); a longer one is not searched

Pattern = Any  # regex.Pattern[str] (the package ships no type stubs)
Match = Any


class MatchBudgetError(ValueError):
    """A ``match`` search that was not run to its end: the reference is too long or the budget ran out."""


def compile_match(pattern: str) -> Pattern:
    """``pattern`` compiled by the engine that runs it; ``ValueError`` with the engine's words if invalid."""
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"match is not a valid regex: {exc}") from None


def search_bounded(pattern: Pattern, subject: str, *, budget_s: float = MATCH_BUDGET_S) -> Match | None:
    """``pattern.search(subject)`` within the budget; raises :class:`MatchBudgetError`."""
    if len(subject) > MAX_MATCH_SUBJECT:
        raise MatchBudgetError(
            f"the reference is {len(subject)} characters long, over the {MAX_MATCH_SUBJECT} a match "
            "regex searches"
        )
    if not isinstance(pattern, regex.Pattern):  # a stdlib ``re`` pattern: run by the bounded engine
        pattern = compile_match(pattern.pattern)
    try:
        return pattern.search(subject, timeout=budget_s)
    except TimeoutError:
        raise MatchBudgetError(
            f"match {_short(pattern.pattern)!r} ran past its {budget_s:g} s budget on this reference "
            "(a pattern that backtracks, such as nested quantifiers: simplify it)"
        ) from None


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
