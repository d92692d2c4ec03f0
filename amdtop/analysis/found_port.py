"""Where a found server in a container can be reached from the host.

A server in its own network namespace (``docker run`` without ``--network host``) listens on its port inside the
container; ``127.0.0.1:<port>`` on the host is someone else, or no one. Docker publishes a port (``-p 8080:8000``)
through its userland proxy, a process on the host whose argv says both ends (moby ``libnetwork/portmapper``
``proxy_linux.go``: ``docker-proxy -proto tcp -host-ip H -host-port P -container-ip C -container-port Q``); the
container's own addresses are in its ``/proc/PID/net/fib_trie`` (``LOCAL`` entries). Where no proxy publishes it
(not published, or published by iptables alone with ``userland-proxy: false``), the URL is unknown and says so.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from amdtop.procinfo import PROC, list_pids, read_cmdline

PROXY = "docker-proxy"
NOT_PUBLISHED = "in a container, port {port} not published: give its URL (e.g. amdtop ramp --url http://HOST:PORT)"


def own_netns(pid: int, proc: Path = PROC) -> bool | None:
    """Whether ``pid`` shares amdtop's network namespace (``None``: unreadable, e.g. another user's process)."""
    try:
        return os.readlink(f"{proc}/{pid}/ns/net") == os.readlink(f"{proc}/self/ns/net")
    except OSError:
        return None


def local_addresses(pid: int, proc: Path = PROC) -> set[str]:
    """The IPv4 addresses of ``pid``'s network namespace (``/32 host LOCAL`` entries of its fib_trie), loopback
    left out."""
    try:
        with open(f"{proc}/{pid}/net/fib_trie", encoding="ascii", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return set()
    out: set[str] = set()
    for before, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            addr = before.strip().removeprefix("|-- ").strip()
            if addr and not addr.startswith("127."):
                out.add(addr)
    return out


def proxy_ports(proc: Path = PROC) -> list[dict[str, str]]:
    """Each running docker-proxy's flags (``proto``, ``host-ip``, ``host-port``, ``container-ip``,
    ``container-port``)."""
    out = []
    for pid in list_pids(proc):
        argv = read_cmdline(pid, proc)
        if not argv or os.path.basename(argv[0]) != PROXY:
            continue
        flags = {argv[i].lstrip("-"): argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("-")}
        out.append(flags)
    return out


def published_url(pid: int, port: int, proc: Path = PROC) -> str | None:
    """The host URL docker-proxy publishes container port ``port`` of ``pid``'s namespace at, ``None`` when none."""
    addrs = local_addresses(pid, proc)
    for flags in proxy_ports(proc):
        if flags.get("proto", "tcp") != "tcp" or flags.get("container-port") != str(port):
            continue
        if addrs and flags.get("container-ip") not in addrs:
            continue
        host = flags.get("host-ip", "0.0.0.0")
        host = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{flags.get('host-port')}"
    return None


def reachable_url(pid: int, port: int | None, url: str | None, proc: Path = PROC) -> tuple[str | None, str | None]:
    """``(url, note)``: ``url`` itself for a server in amdtop's namespace; for one in a container, the published
    host URL, else ``None`` and the line saying so."""
    if port is None or url is None or own_netns(pid, proc) is not False:
        return url, None
    found = published_url(pid, port, proc)
    if found is not None:
        return found, f"in a container: its port {port} is published at {found}"
    return None, NOT_PUBLISHED.format(port=port)
