"""Record forms: one module per JSON form a release writes, behind :class:`RecordForm`, found through
:data:`FORMS`.

A form says whether a decoded JSON object is written in it (:meth:`RecordForm.claims`) and turns it into
normalised messages whose media parts sit in place (:meth:`RecordForm.messages`); the caller adds the id, the
media list and the line. Forms are tried in the registry's order, the first that claims an object reads it
(a row with both ``messages`` and ``conversations`` is read as ``messages``).

Adding a form: one module here with a class like the ones below, one line in :data:`FORMS`, one test.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

from ....schemas.records import Message
from .conversations import ConversationsForm
from .messages import MessagesForm


class RecordForm(Protocol):
    #: The ``Record.form`` of the records it yields, and the field whose absence the reject names.
    name: str

    def claims(self, obj: dict[str, Any]) -> bool:
        """True when ``obj`` is written in this form."""
        ...

    def messages(self, obj: dict[str, Any], allowed: Collection[str]) -> list[Message]:
        """Normalised messages with media parts in place; raises ``Invalid`` with the reject reason."""
        ...


FORMS: dict[str, RecordForm] = {
    "messages": MessagesForm(),  # Nemotron Image Training v3 / VLM Dataset v2; LLaMA-Factory
    "conversations": ConversationsForm(),  # LLaVA, Llama-Nemotron-VLM-Dataset-v1, Mantis
}
