"""Opt-outs a server states in its answer: ``X-Robots-Tag`` directives that forbid using the media for AI
training, honoured as img2dataset honours them (its default ``--disallowed_header_directives``).

A header value is ``directive, directive`` (for every crawler) or ``token: directive, ...`` (for the crawler
whose User-Agent product token is ``token``); a header may be sent more than once. A media answer carrying a
disallowed directive for us is a failure of its own class (``opted_out``): its body is never read or stored.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from importlib import metadata

#: img2dataset's default ``--disallowed_header_directives``.
DISALLOWED_DIRECTIVES: tuple[str, ...] = ("noai", "noimageai", "noindex", "noimageindex")


def _version() -> str:
    try:
        return metadata.version("vlmforge")
    except metadata.PackageNotFoundError:  # a checkout on the path, not installed
        return "0"


#: The User-Agent of every HTTP request unless ``--user-agent`` says otherwise: the product token
#: ``vlmforge`` (what an ``X-Robots-Tag: vlmforge: noai`` names), the version, and what the fetch is for.
DEFAULT_USER_AGENT = (
    f"vlmforge/{_version()} (compatible; vlmforge; media for VLM training data; honours X-Robots-Tag noai)"
)


def robots_token(user_agent: str) -> str:
    """The product token of a User-Agent (``vlmforge`` of ``vlmforge/0.1.0 (...)``), lower case."""
    words = user_agent.strip().split()
    return words[0].split("/", 1)[0].lower() if words else ""


def opted_out(values: Iterable[str], token: str, disallowed: Collection[str]) -> str | None:
    """The first disallowed directive among ``X-Robots-Tag`` header ``values`` that applies to the crawler
    ``token`` (one for every crawler, or one naming it), or None."""
    for value in values:
        head, sep, rest = value.partition(":")
        named = head.strip().lower() if sep else None
        if named is not None and named != token:
            continue  # another crawler's (or a directive with a value, e.g. unavailable_after: <date>)
        for directive in (rest if sep else value).split(","):
            d = directive.strip().lower()
            if d in disallowed:
                return f"{named}: {d}" if named else d
    return None
