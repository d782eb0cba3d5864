"""The references of one subset sized through its recipe: :func:`size_references` tries the recipe's sources
in order exactly as the fetch stage does (:func:`~vlmforge.tasks.fetch.acquire.fetch_batch`): a reference a
source cannot answer goes on to the next one. Each source kind sizes its references beside its fetch
(``size`` of the fetch stage's ``SOURCES``).

Each kind names an object as the run would (the store's upstream-index key: URL, ``s3://`` locator, zip
``URL#member``; a file or tar member for media read in place) and says how its size is known: from an index
(exact), or from a sample of HEAD requests.
"""

from __future__ import annotations

from ...schemas.recipe_match import MatchBudgetError
from ...schemas.recipes import Recipe, ref_variables
from ..fetch import SOURCES, Located, Miss, SizeAnswer, Sized, SizingContext
from ..http import MATCH_BUDGET, NO_SOURCE
from ..parse import normalize_ref, unsafe_ref_reason


def size_references(refs: list[str], recipe: Recipe, ctx: SizingContext) -> dict[str, SizeAnswer]:
    """One answer per distinct reference: each recipe source in turn sizes the references still open that
    its ``match`` accepts; the first object found wins (the fetch stage's order)."""

    out: dict[str, SizeAnswer] = {}
    misses: dict[str, Miss] = {}
    todo: list[str] = []
    for ref in dict.fromkeys(refs):
        bad = unsafe_ref_reason(ref)
        if bad:
            out[ref] = Miss(NO_SOURCE, f"unsafe reference ({bad})")
        else:
            todo.append(ref)
    for source in recipe.sources:
        match = source.compiled_match()
        located: Located = {}
        for ref in todo:
            try:
                variables = ref_variables(normalize_ref(ref), match)
            except MatchBudgetError as exc:  # the run rejects it the same way
                misses.setdefault(ref, Miss(MATCH_BUDGET, str(exc)))
                continue
            if variables is not None:
                located[ref] = variables
        if not located:
            continue
        for ref, answer in SOURCES[source.kind].size(source, located, ctx).items():
            if isinstance(answer, Sized):
                out[ref] = answer
            else:
                misses[ref] = answer
        todo = [r for r in todo if r not in out]
    for ref in todo:
        out[ref] = misses.get(ref, Miss(NO_SOURCE, "no recipe source applies to the reference"))
    return out
