"""Mutable per-communicator state the parser fills, and its freezing into report values."""

from __future__ import annotations

from dataclasses import dataclass, field

from amdtop.rccl.report import Comm, Edge, RankInfo


@dataclass(slots=True)
class RankState:
    """One rank as lines about it arrive."""

    rank: int
    dev: int | None = None
    bus_id: str | None = None
    host: str | None = None
    pid: int | None = None
    complete: bool = False
    init_s: float | None = None


@dataclass(slots=True)
class CommState:
    """One communicator as lines about it arrive (merged over every rank's file)."""

    key: str
    nranks: int
    ranks: dict[int, RankState] = field(default_factory=dict)
    # (src, dst, transport) -> channel ids seen
    edges: dict[tuple[str, str, str], set[tuple[str, str | None, str | None]]] = field(default_factory=dict)
    nnodes: int | None = None
    rings: set[int] = field(default_factory=set)
    trees: set[int] = field(default_factory=set)
    coll_channels: int | None = None
    ended: str | None = None

    def rank(self, r: int) -> RankState:
        got = self.ranks.get(r)
        if got is None:
            got = self.ranks[r] = RankState(r)
        return got


def freeze(c: CommState) -> Comm:
    """The frozen :class:`Comm` of ``c``."""
    ranks = tuple(
        RankInfo(r.rank, r.dev, r.bus_id, r.host, r.pid, r.complete, r.init_s) for _, r in sorted(c.ranks.items())
    )
    edges = tuple(
        sorted(
            (
                Edge(int(s), int(d), t, len({(int(ch), int(conn or 0)) for ch, conn, _dir in seen}))
                for (s, d, t), seen in c.edges.items()
            ),
            key=lambda e: (e.src, e.dst, e.transport),
        )
    )
    nranks = c.nranks or (max(c.ranks) + 1 if c.ranks else 0)
    return Comm(c.key, nranks, ranks, edges, c.nnodes, len(c.rings), len(c.trees), c.coll_channels, c.ended)
