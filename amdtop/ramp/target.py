"""The ramp's target: a base URL checked (scheme, host, port) before anything runs.

Left to the HTTP client, ``http://127.0.0.1:99999`` or ``http://[::1`` fail deep inside the first request's
connection, after the state dir and observer are set up; checked here they are one line naming the flag.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from amdtop.secrets import mask_url

EXAMPLE = "http://127.0.0.1:8000"
SCHEMES = ("http", "https")
_HOST = re.compile(r"^[A-Za-z0-9._~%-]+$")
"""A DNS name or IPv4 address; IPv6 literals come bracketed and are checked by urlsplit."""


def check_base_url(text: str) -> str:
    """``text`` unchanged when it is an http(s) base URL with a host and a port in 1-65535.

    Raises:
        ValueError: one line saying what is wrong and how a good one looks (a password in it is masked).
    """
    shown = mask_url(text)
    try:
        parts = urlsplit(text.strip())
    except ValueError:  # urlsplit refuses only an unclosed IPv6 bracket
        raise ValueError(f"{shown!r}: the [ of an IPv6 host is never closed; e.g. http://[::1]:8000") from None
    try:
        port = parts.port
    except ValueError:  # out of range or not a number
        given = parts.netloc.rpartition(":")[2]
        raise ValueError(f"{shown!r}: port {given!r} is not a number in 1-65535; e.g. {EXAMPLE}") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(f"{shown!r} needs http:// or https:// in front of the host; e.g. {EXAMPLE}")
    host = parts.hostname
    if not host:
        raise ValueError(f"{shown!r} names no host; e.g. {EXAMPLE}")
    if ":" not in host and not _HOST.match(host):
        raise ValueError(f"{shown!r}: host {host!r} is not a host name or address; e.g. {EXAMPLE}")
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{shown!r}: port {port} is outside 1-65535; e.g. {EXAMPLE}")
    if parts.query or parts.fragment:
        raise ValueError(f"{shown!r}: a base URL carries no ?query or #fragment; e.g. {EXAMPLE}")
    return text.strip()
