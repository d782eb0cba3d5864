"""Where an upstream may send the client: the redirect policy of a recipe's source (``redirects:``).

A redirect is the server choosing the next URL, so a hostile or compromised upstream can point the fetcher
at a cloud metadata endpoint (169.254.169.254), a service on the worker's loopback, a private address, or
downgrade https to plain http. The rules, whatever the policy:

- only ``http`` and ``https``, never from ``https`` to ``http``;
- never to a loopback, private, link-local, multicast, reserved or unspecified address, unless the recipe's
  own URL names such an address (an IP literal or ``localhost``: a mirror on the local network);

and per policy (``schemas/recipes.py``, ``REDIRECT_POLICIES``):

- ``same_host`` (default): the same host name and port (http -> https on the same host is allowed only from
  port 80 to 443, the two schemes' own ports: an upgrade to another port is another service);
- ``any_public_host``: any host whose addresses pass the rule above;
- ``any_host``: any host and address (for a mirror behind a private load balancer; still http(s) only and
  never a downgrade).

A target host name is resolved (the client's resolver, else the system's) to judge its addresses.

A source's own headers (a token) follow its URL's origin exactly: :func:`same_origin` compares scheme, host
name and port, so a redirect to another port or scheme of the same host gets no credential.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import SplitResult

DEFAULT_POLICY = "same_host"
Resolve = Callable[[str], str]


def _port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def same_origin(a: SplitResult, b: SplitResult) -> bool:
    """Same scheme, host name (case-insensitive) and port (the scheme's default when none is written)."""
    return (a.scheme, (a.hostname or "").lower(), _port(a)) == (
        b.scheme,
        (b.hostname or "").lower(),
        _port(b),
    )


def _is_upgrade(current: SplitResult, target: SplitResult) -> bool:
    """http -> https between the two schemes' own ports (80 -> 443)."""
    return (current.scheme, _port(current), target.scheme, _port(target)) == ("http", 80, "https", 443)


def addresses(host: str, resolve: Resolve | None) -> list[str]:
    try:
        ipaddress.ip_address(host)
        return [host]
    except ValueError:
        pass
    if resolve is not None:
        mapped = resolve(host)
        if mapped != host:
            return [mapped]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return []  # unresolvable: the request itself will fail as dns_error
    return sorted({str(info[4][0]) for info in infos})


def is_internal_address(address: str) -> bool:
    """Loopback, private, link-local, multicast, reserved or unspecified (IPv4 or IPv6)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return bool(
        ip.is_loopback
        or ip.is_private
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (ip.version == 6 and ip.ipv4_mapped is not None and is_internal_address(str(ip.ipv4_mapped)))
    )


def names_internal_host(parts: SplitResult) -> bool:
    """The URL itself names an internal address (an IP literal in those ranges, or localhost)."""
    host = (parts.hostname or "").lower()
    return host == "localhost" or host.endswith(".localhost") or is_internal_address(host)


def redirect_refusal(
    origin: SplitResult,
    current: SplitResult,
    target: SplitResult,
    policy: str,
    resolve: Resolve | None = None,
) -> str | None:
    """Why following ``current`` -> ``target`` breaks ``policy`` (``origin``: the recipe's URL), or None."""
    if target.scheme not in ("http", "https") or not target.hostname:
        return f"redirect to a non-http(s) URL ({target.scheme or 'no scheme'}://)"
    if current.scheme == "https" and target.scheme == "http":
        return "redirect from https to http"
    same = target.hostname.lower() == (current.hostname or "").lower()
    if policy == DEFAULT_POLICY:
        if same and (_port(target) == _port(current) or _is_upgrade(current, target)):
            return None
        where = f"{target.hostname}:{_port(target)}"
        return f"redirect to another host or port ({where}); the recipe's `redirects:` is same_host"
    if same or policy == "any_host" or names_internal_host(origin):
        return None
    internal = [a for a in addresses(target.hostname, resolve) if is_internal_address(a)]
    if internal:
        return (
            f"redirect to an internal address ({target.hostname} is {internal[0]}: loopback, private or "
            "link-local); set `redirects: any_host` in the recipe if the mirror lives there"
        )
    return None
