"""The one exception the record parsers raise: it carries the finished reject reason.

Parsing a record is a chain of checks several functions deep; raising :class:`Invalid` with the reason
(built through the reasons registry) lets each check stop the record at once, and the caller turns it into
exactly one Reject. It never escapes the parse package.
"""

from __future__ import annotations

from ...schemas.reasons import reason


class Invalid(Exception):
    def __init__(self, reason_text: str) -> None:
        super().__init__(reason_text)
        self.reason = reason_text


def invalid_record(detail: str) -> Invalid:
    """``invalid_record: <detail>``: a field is missing, has the wrong type or nests too deep."""
    return Invalid(reason("invalid_record", detail))
