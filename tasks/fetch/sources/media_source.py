"""The one interface every upstream media source kind implements.

A recipe (``schemas/recipes.py``) lists sources, each a pydantic model with a ``kind``; the batch driver
(:func:`..acquire.fetch_batch`) hands each source the references it may answer (those its ``match`` regex
accepts, with their template variables) and takes its answers: an ok :class:`~..outcomes.FetchOutcome` or a
:class:`~..failures.FetchError` per reference. References a source leaves unanswered or failed go on to the
next source. A source never raises for one reference: failures are answers.

Adding a kind: its pydantic model in ``schemas/recipes.py`` (and the ``Source`` union), a module here with a
class implementing :class:`MediaSource`, and its line in :data:`~.SOURCES`; its sizer for ``catalog
--estimate`` (``tasks/estimate/sizes.py``). Both registries fail at import while a kind lacks its part.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from ..batch_state import BatchRun
from ..outcomes import Answers, Located

SourceModel = TypeVar("SourceModel", contravariant=True)


class MediaSource(Protocol[SourceModel]):
    """One source kind: answers the ``located`` references of one batch from ``source`` (its recipe
    entry), using the batch's client, store, pool and deadline (``run``)."""

    kind: str

    def answer(self, source: SourceModel, located: Located, run: BatchRun) -> Answers: ...
