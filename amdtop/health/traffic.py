"""Live fabric traffic (XGMI, NVLink) from per-link counter deltas between two polls.

Each GPU counts the data it read and wrote over each of its links. A link whose peer is known (amdsmi link metrics,
NVML remote PCI info) is attributed to the GPU pair; one whose peer is unknown (gpu_metrics alone) counts towards
its GPU's totals only. Rates are what the *counting* GPU saw: ``PairTraffic(src=a, peer=b)`` is GPU a's reads from
and writes to GPU b. A counter that went down (driver reload) gives no rate for that link in that interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from amdtop.health.counters import counter_delta
from amdtop.model import NodeSnapshot, XgmiLinkCounters

KB = 1000  # amdsmi/gpu_metrics "KiloBytes"; the device-metrics-exporter publishes them as KB


@dataclass(frozen=True, slots=True)
class PairTraffic:
    """What GPU ``src`` counted on its link(s) to GPU ``peer`` over the interval."""

    src: int
    peer: int
    read_bps: float | None
    """Bytes/s ``src`` read from ``peer``."""
    write_bps: float | None
    """Bytes/s ``src`` wrote to ``peer``."""

    @property
    def total_bps(self) -> float | None:
        """Read + write, where both are known."""
        if self.read_bps is None or self.write_bps is None:
            return None
        return self.read_bps + self.write_bps


@dataclass(frozen=True, slots=True)
class GpuTraffic:
    """All of one GPU's links, attributed to a peer or not."""

    gpu: int
    read_bps: float | None
    write_bps: float | None
    links: tuple[tuple[int, str | None, float | None, float | None], ...] = ()
    """(link, peer bdf, read B/s, write B/s) per link."""


@dataclass(frozen=True, slots=True)
class FabricTraffic:
    """Traffic over one interval between two polls."""

    interval_s: float
    pairs: tuple[PairTraffic, ...]
    gpus: tuple[GpuTraffic, ...]

    def pair(self, src: int, peer: int) -> PairTraffic | None:
        """GPU ``src``'s traffic to ``peer``."""
        for p in self.pairs:
            if p.src == src and p.peer == peer:
                return p
        return None

    def gpu(self, index: int) -> GpuTraffic | None:
        """GPU ``index``'s totals."""
        for g in self.gpus:
            if g.gpu == index:
                return g
        return None


@dataclass(frozen=True, slots=True)
class GroupTraffic:
    """A TP group's fabric traffic: what its GPUs exchanged with each other, and all their links together."""

    gpus: tuple[int, ...]
    intra_read_bps: float | None
    """Reads between the group's GPUs (peers known), B/s."""
    intra_write_bps: float | None
    """Writes between the group's GPUs, B/s."""
    total_read_bps: float | None
    """Reads over all links of the group's GPUs, B/s."""
    total_write_bps: float | None
    """Writes over all links of the group's GPUs, B/s."""


def _rate(old: int | None, new: int | None, dt: float) -> float | None:
    if old is None or new is None:
        return None
    d = counter_delta(old, new)
    return None if d is None else d * KB / dt


def _sum(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def fabric_traffic(older: NodeSnapshot, newer: NodeSnapshot) -> FabricTraffic | None:
    """Rates between two snapshots of the same node; ``None`` when no GPU has link counters in both or time did not
    advance."""
    dt = newer.timestamp - older.timestamp
    if dt <= 0:
        return None
    by_bdf = {g.bdf: g.index for g in newer.topology.gpus}
    pairs: dict[tuple[int, int], list[tuple[float | None, float | None]]] = {}
    gpus: list[GpuTraffic] = []
    for new in newer.gpus:
        old = older.sample(new.index)
        if new.lost or old is None or old.lost or new.xgmi_links is None or old.xgmi_links is None:
            continue
        before: dict[int, XgmiLinkCounters] = {c.link: c for c in old.xgmi_links}
        links = []
        for c in new.xgmi_links:
            prev = before.get(c.link)
            if prev is None or prev.peer_bdf != c.peer_bdf:
                continue  # the link now leads elsewhere: no delta
            r, w = _rate(prev.read_kb, c.read_kb, dt), _rate(prev.write_kb, c.write_kb, dt)
            links.append((c.link, c.peer_bdf, r, w))
            peer = by_bdf.get(c.peer_bdf) if c.peer_bdf else None
            if peer is not None and peer != new.index:
                pairs.setdefault((new.index, peer), []).append((r, w))
        gpus.append(
            GpuTraffic(new.index, _sum(r for _, _, r, _ in links), _sum(w for _, _, _, w in links), tuple(links))
        )
    if not gpus:
        return None
    pair_list = tuple(
        PairTraffic(a, b, _sum(r for r, _ in rw), _sum(w for _, w in rw)) for (a, b), rw in sorted(pairs.items())
    )
    return FabricTraffic(dt, pair_list, tuple(gpus))


def group_traffic(traffic: FabricTraffic, gpus: Sequence[int]) -> GroupTraffic:
    """Sum ``traffic`` over one TP group's GPUs (what the integrator shows per worker)."""
    members = set(gpus)
    intra = [p for p in traffic.pairs if p.src in members and p.peer in members]
    totals = [g for g in traffic.gpus if g.gpu in members]
    return GroupTraffic(
        tuple(gpus),
        _sum(p.read_bps for p in intra),
        _sum(p.write_bps for p in intra),
        _sum(g.read_bps for g in totals),
        _sum(g.write_bps for g in totals),
    )


def latest_traffic(history: Sequence[NodeSnapshot]) -> FabricTraffic | None:
    """Traffic over the last interval of ``history`` (oldest first)."""
    if len(history) < 2:
        return None
    return fabric_traffic(history[-2], history[-1])
