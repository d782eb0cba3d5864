"""Which locations a recipe may name: the URL schemes of an ``archive`` url and a ``local`` root, no fsspec
chaining. Checked when a recipe is read (``schemas/recipes.py``); the addresses and folders are judged by the
fetch stage's policy (``tasks/http/policy.py``)."""

from __future__ import annotations

#: The URL schemes a recipe's archive url and local root may use (a plain path is a local file). fsspec's
#: chaining (``simplecache::http://...``) and its other protocols would go around the fetch client: its
#: deadlines, redirect policy and address rules.
LOCATION_SCHEMES: frozenset[str] = frozenset({"http", "https", "s3", "hf", "file"})
ALLOW_PRIVATE_HELP = (
    "the url may be on a loopback, private or link-local address (a mirror on the local network); "
    "refused by default"
)


def location_problem(field: str, value: str) -> str | None:
    """Why ``value`` (an archive url, a local root) is not a location a recipe may name, or None."""
    if "::" in value:
        return f"{field} {value[:80]!r} chains fsspec protocols (::): name one location"
    scheme = value.split("://", 1)[0].lower() if "://" in value else None
    if scheme is not None and scheme not in LOCATION_SCHEMES:
        return f"{field} scheme {scheme}:// is not one of {', '.join(sorted(LOCATION_SCHEMES))}"
    return None
