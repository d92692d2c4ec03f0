"""NICs each host offers RCCL/NCCL, from its network lines, and whether the hosts of one job agree.

``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ...``, ``NET/Socket : Using [0]eth0:10.0.0.1<0> ...``, plugin
lines (``NET/OFI NIC group 0 device #0 0000:56:00.0``), ``Initializing NIC`` lines (a form assumed: see
:data:`amdtop.logread.rccl.grammar.INIT_NIC`) and ``Using network IB`` (``IBext``: the IB plugin). Hosts of
one job that list different devices for the network in use run unequal rails: the job goes as fast as the host with
the fewest, or hangs where a rail has no peer.
"""

from __future__ import annotations

from dataclasses import dataclass

from amdtop.logread.rccl import grammar as g


@dataclass(frozen=True, slots=True)
class HostNics:
    """One host's NICs as its processes listed them."""

    host: str
    """Host name from the line heads (``?`` where the lines carry none)."""
    devices: tuple[str, ...]
    """Devices of the network in use (all listed devices where no ``Using network`` line says which)."""
    network: str | None
    """``IB``, ``Socket``, ``Libfabric``... from ``Using network``."""
    listed: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every list seen: ``(source, devices)``, e.g. ``("NET/IB", ("mlx5_0", "mlx5_1"))``."""


class NicLines:
    """Collects NIC lines per host; :meth:`report` gives the hosts' lists."""

    def __init__(self) -> None:
        self._lists: dict[str, dict[str, list[str]]] = {}
        self._used: dict[str, str] = {}
        # each process prints these lines at each init: a list line met on its host adds nothing new, and a
        # ``Using network`` text names the same network every time
        self._listed: set[tuple[str, str]] = set()
        self._networks: dict[str, str | None] = {}

    def line(self, host: str | None, msg: str) -> None:
        """One ``NET/…``, ``Initializing NIC …`` or ``Using network …`` message (the text after ``NCCL INFO``)."""
        h = host or "?"
        if msg.startswith("Using network "):
            if msg not in self._networks:
                if len(self._networks) > 4096:
                    self._networks.clear()
                m = g.USING_NETWORK.match(msg)
                self._networks[msg] = m.group(1) if m else None
            used = self._networks[msg]
            if used is not None:
                self._used[h] = used
            return
        if (h, msg) in self._listed:
            return
        if len(self._listed) > 4096:
            self._listed.clear()  # only a memo: forgetting it costs a regex, never a device
        self._listed.add((h, msg))
        m = g.NET_USING.match(msg)
        if m:
            devices = m.group(2).split(";", 1)[0]
            self._add(h, m.group(1), [name for _i, name in g.NET_DEVICE.findall(devices)])
            return
        m = g.OFI_NIC.match(msg)
        if m:
            self._add(h, "NET/OFI", [m.group(1)])
            return
        if "Initializing NIC" in msg:
            m = g.INIT_NIC.match(msg)
            if m:
                # a plugin's own line joins its NET/<plugin> list; a bare one is listed under "NIC"
                self._add(h, m.group(1) or "NIC", [m.group(2)])

    def _add(self, host: str, source: str, names: list[str]) -> None:
        have = self._lists.setdefault(host, {}).setdefault(source, [])
        for name in names:
            if name not in have:
                have.append(name)

    def report(self) -> tuple[HostNics, ...]:
        """Per host, sorted by host."""
        out = []
        for host in sorted(set(self._lists) | set(self._used)):
            lists = self._lists.get(host, {})
            used = self._used.get(host)
            out.append(HostNics(host, _in_use(lists, used), used, tuple((k, tuple(v)) for k, v in lists.items())))
        return tuple(out)


def _in_use(lists: dict[str, list[str]], used: str | None) -> tuple[str, ...]:
    if used is not None:
        for source, names in lists.items():
            # ``Using network IB`` -> NET/IB; ``Libfabric`` / ``AWS Libfabric`` -> NET/OFI or NET/AWS Libfabric
            if source == f"NET/{used}" or (used.startswith("IB") and source == "NET/IB") or (
                "Libfabric" in used and (source.startswith("NET/OFI") or "Libfabric" in source)
            ):
                return tuple(names)
    merged: list[str] = []
    for names in lists.values():
        merged += [n for n in names if n not in merged]
    return tuple(merged)


def mismatch(hosts: tuple[HostNics, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(host, devices it lacks that another host lists)`` for each host short of the union; empty when all agree.

    Only hosts that listed devices count (a host whose lines are not in the set says nothing); two or more needed.
    """
    listed = [h for h in hosts if h.devices]
    if len(listed) < 2 or len({frozenset(h.devices) for h in listed}) == 1:
        return ()
    union: list[str] = []
    for h in listed:
        union += [d for d in h.devices if d not in union]
    return tuple((h.host, tuple(d for d in union if d not in h.devices)) for h in listed if set(union) - set(h.devices))
