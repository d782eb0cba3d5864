"""The one interface every upstream media source kind implements: its fetch (``answer``) and its estimate
(``size``).

A recipe (``schemas/recipes.py``) lists sources, each a pydantic model with a ``kind``; the batch driver
(:func:`..acquire.fetch_batch`) hands each source the references it may answer (those its ``match`` regex
accepts, with their template variables) and takes its answers: an ok :class:`~..outcomes.FetchOutcome` or a
:class:`~..failures.FetchError` per reference. References a source leaves unanswered or failed go on to the
next source. A source never raises for one reference: failures are answers.

``catalog --estimate`` asks the same source to ``size`` the references instead (:mod:`..sizing`): what the
run would fetch and how many bytes, from indexes and samples, never a media body.

Adding a kind: its pydantic model in ``schemas/recipes.py`` (in the ``Source`` union, with the README URL
shapes ``recipe init`` drafts it from), a module here with a class implementing :class:`MediaSource`, and its
line in :data:`~.SOURCES`, which fails at import while a kind lacks its class or its class lacks a part.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from ..batch_state import BatchRun
from ..outcomes import Answers, Located
from ..sizing import SizeAnswer, SizingContext

SourceModel = TypeVar("SourceModel", contravariant=True)

#: The methods every kind's class has (checked when :data:`~.SOURCES` is built), and what each is for.
PARTS = {"answer": "its fetch: the run's answers", "size": "its sizer: what catalog --estimate reports"}


class MediaSource(Protocol[SourceModel]):
    """One source kind: answers the ``located`` references of one batch from ``source`` (its recipe
    entry), using the batch's client, store, pool and deadline (``run``)."""

    kind: str

    def answer(self, source: SourceModel, located: Located, run: BatchRun) -> Answers: ...

    def size(self, source: SourceModel, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        """The same references sized as the run would fetch them (``ctx``: the estimate's client, pool,
        store and samples), one :class:`~..sizing.Sized` or :class:`~..sizing.Miss` each."""
        ...
