"""What a recipe may make a worker read: the fetch policy every source kind goes through.

A recipe is written by someone other than whoever runs it, so its locations are judged before anything is
sent or read:

- an http(s) url (``http_files``, ``archive``) whose host is, or resolves to, a loopback, private,
  link-local (cloud metadata: 169.254.169.254), multicast, reserved or unspecified address is refused as
  ``internal_address`` unless its source says ``allow_private: true`` (a mirror on the local network);
  redirects are judged by :mod:`.redirects` on top;
- a ``local`` root must lie under the release or a ``--media-root`` (symlinks resolved first): ``/etc`` is
  ``root_not_allowed``;
- the schemes are the recipe schema's (``schemas.recipes.LOCATION_SCHEMES``, no fsspec chaining), checked
  when the recipe is read.

A non-media body (JSON, text) is refused by the client as it arrives (``failures.non_media_body``), before
any byte is stored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlsplit

from .failures import INTERNAL_ADDRESS, ROOT_NOT_ALLOWED, FetchError
from .redirects import Resolve, addresses, is_internal_address, names_internal_host

__all__ = ["check_local_root", "check_url"]


def check_url(url: str, allow_private: bool, resolve: Resolve | None = None) -> None:
    """Raise ``internal_address`` when ``url`` (http or https) is on an internal address the source does
    not declare; other schemes are left to their readers."""
    parts = urlsplit(url)
    if allow_private or parts.scheme not in ("http", "https") or not parts.hostname:
        return
    host = parts.hostname
    if names_internal_host(parts):
        internal = host
    else:
        internal = next((a for a in addresses(host, resolve) if is_internal_address(a)), "")
    if internal:
        where = host if internal == host else f"{host} is {internal}"
        raise FetchError(
            INTERNAL_ADDRESS,
            f"{where} is a loopback, private or link-local address; a recipe reaches it only with "
            "`allow_private: true` on its source",
            url=url,
        )


def check_local_root(root: str, allowed: Iterable[str]) -> None:
    """Raise ``root_not_allowed`` when the local folder ``root`` is not under one of ``allowed``."""
    real = os.path.realpath(root)
    bases = [os.path.realpath(a) for a in allowed if a]
    if not any(real == b or real.startswith(b.rstrip(os.sep) + os.sep) for b in bases):
        raise FetchError(
            ROOT_NOT_ALLOWED,
            f"local root {root} is not under the release or a --media-root; pass it with --media-root",
        )
