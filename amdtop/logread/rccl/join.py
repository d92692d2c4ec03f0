"""Join per-process communicator views into communicators (amd.md §6: one communicator, many processes).

By ``commId`` where printed. Otherwise by what the lines share: the same nRanks, the n-th communicator of that size
each process initialised (collective init runs in the same order on every member), ranks that do not collide, and
bus ids that agree (each process names its peers' bus ids in its channel lines).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice

from amdtop.logread.rccl.phases import phase_name
from amdtop.logread.rccl.report import Comm, Edge, RankInfo
from amdtop.logread.rccl.state import ProcComm, ProcKey


def _ordinals(procs: Sequence[ProcComm]) -> dict[int, int]:
    """id(pc) -> the how-many-th communicator of its size its process initialised.

    Ranks of one size met in one process before its previous group completed init belong to that group (one process
    driving several GPUs: ``ncclCommInitAll``); a repeated rank or a finished init starts the next one.
    """
    out: dict[int, int] = {}
    current: dict[tuple[ProcKey, int], tuple[int, set[int], int | None]] = {}
    for pc in procs:
        key = (pc.proc, pc.nranks)
        got = current.get(key)
        ranks = pc.own_ranks()
        if got is None:
            k, seen, done = 0, set(ranks), _done_before(pc)
        else:
            k, seen, done = got
            # a group whose init started and completed before this one began is over
            finished = done is not None and done < pc.seq
            if finished or not ranks or ranks & seen:
                k, seen, done = k + 1, set(ranks), _done_before(pc)
            else:
                seen |= ranks
                mine = _done_before(pc)
                done = mine if done is None else (done if mine is None else max(done, mine))
        current[key] = (k, seen, done)
        out[id(pc)] = k
    return out


def _done_before(pc: ProcComm) -> int | None:
    # only an Init START ... Init COMPLETE pair marks a finished group; old COMPLETE-only lines say nothing of order
    if pc.started_seq is not None and pc.complete_seq is not None and pc.complete_seq > pc.started_seq:
        return pc.complete_seq
    return None


class _Cluster:
    __slots__ = ("bus", "members", "ranks")

    def __init__(self) -> None:
        self.members: list[ProcComm] = []
        self.ranks: set[int] = set()
        self.bus: dict[int, str] = {}

    def fits(self, pc: ProcComm) -> bool:
        if pc.own_ranks() & self.ranks:
            return False
        return all(self.bus.get(r, b) == b for r, b in _bus_map(pc).items())

    def add(self, pc: ProcComm) -> None:
        self.members.append(pc)
        self.ranks |= pc.own_ranks()
        self.bus.update(_bus_map(pc))


def _bus_map(pc: ProcComm) -> dict[int, str]:
    out = dict(pc.peers)
    if pc.rank is not None and pc.bus_id is not None:
        out[pc.rank] = pc.bus_id
    return out


def group(procs: Sequence[ProcComm]) -> list[tuple[str | None, list[ProcComm]]]:
    """Groups of per-process views, each one communicator, in order of first appearance; with the commId if any."""
    ordinal = _ordinals(procs)
    by_id: dict[str, list[ProcComm]] = {}
    buckets: dict[tuple[int, int], list[_Cluster]] = {}
    order: list[tuple[str | None, list[ProcComm]]] = []
    for pc in procs:
        if pc.comm_id is not None:
            members = by_id.get(pc.comm_id)
            if members is None:
                members = by_id[pc.comm_id] = []
                order.append((pc.comm_id, members))
            members.append(pc)
            continue
        clusters = buckets.setdefault((pc.nranks, ordinal[id(pc)]), [])
        for cl in clusters:
            if cl.fits(pc):
                cl.add(pc)
                break
        else:
            cl = _Cluster()
            cl.add(pc)
            clusters.append(cl)
            order.append((None, cl.members))
    return order


FreezeCache = dict[tuple[object, ...], Comm]
"""Frozen communicators by their members' fingerprints (see :func:`join`)."""


def join(procs: Sequence[ProcComm], cache: FreezeCache | None = None) -> list[Comm]:
    """The communicators of ``procs`` (see module doc).

    ``cache``: the previous call's frozen communicators; a communicator whose members printed nothing since is reused
    (a live tail joins every poll, and most communicators of a long log are long finished). Updated in place to hold
    only this call's.
    """
    out = []
    synthetic = 0
    fresh: FreezeCache = {}
    for comm_id, members in group(procs):
        if comm_id is None:
            synthetic += 1
        key_id = comm_id or f"comm-{synthetic}"
        if cache is None:
            out.append(freeze(key_id, members, comm_id is not None))
            continue
        key = (key_id, comm_id is not None, *(_fingerprint(pc) for pc in members))
        comm = cache.get(key)
        if comm is None:
            comm = freeze(key_id, members, comm_id is not None)
        fresh[key] = comm
        out.append(comm)
    if cache is not None:
        cache.clear()
        cache.update(fresh)
    return out


def _fingerprint(pc: ProcComm) -> tuple[object, ...]:
    # everything freeze reads; sets and dicts only grow, so their sizes say whether they changed
    return (
        id(pc),
        pc.rank,
        pc.nranks,
        pc.dev,
        pc.bus_id,
        pc.comm_id,
        pc.ptr,
        pc.phase,
        pc.complete_seq,
        pc.ended,
        pc.init_s,
        pc.nnodes,
        pc.coll_channels,
        pc.rings,
        pc.trees,
        len(pc.printers),
        len(pc.peers),
        len(pc.edges),
        sum(map(len, pc.edges.values())),
    )


def freeze(key: str, members: Sequence[ProcComm], by_id: bool) -> Comm:
    """One frozen :class:`Comm` from the per-process views of one communicator."""
    nranks = max((pc.nranks for pc in members), default=0)
    infos: dict[int, RankInfo] = {}
    bus: dict[int, str] = {}
    for pc in members:
        bus.update(pc.peers)
    for pc in members:
        for r in sorted(pc.own_ranks()):
            if r in infos and infos[r].pid is not None:
                continue
            mine = pc.rank == r or len(pc.own_ranks()) == 1  # its own facts are this rank's
            b = (pc.bus_id if mine else None) or bus.get(r)
            done = pc.complete_seq is not None
            infos[r] = RankInfo(
                r,
                pc.dev if mine else None,
                b,
                pc.host,
                pc.pid,
                done,
                pc.init_s if mine else None,
                pc.ptr,
                phase_name(pc.phase),
            )
    _place_unranked(members, infos, bus)
    own = set(infos)
    for r, b in bus.items():
        if r not in infos:
            infos[r] = RankInfo(r, None, b, None, None)
    hosts = {r: i.host for r, i in infos.items() if i.host}
    nnodes = max((pc.nnodes for pc in members if pc.nnodes is not None), default=None)
    size = nranks or (max(infos) + 1 if infos else 0)
    seen_hosts = len(set(hosts.values()))
    if nnodes is None and size and (seen_hosts > 1 or all(r in hosts for r in range(size))):
        # every rank's host is known, or several are: the node count (at least) is known too
        nnodes = seen_hosts
    edges = _edges(members, hosts, nnodes)
    for e in edges:
        # a peer named only by a cudaDev bracket (NCCL >= 2.19): a rank without facts, still a rank
        for r in (e.src, e.dst):
            infos.setdefault(r, RankInfo(r, None, None, None, None))
    ended = (
        "aborted"
        if any(pc.ended == "aborted" for pc in members)
        else next((pc.ended for pc in members if pc.ended), None)
    )
    coll = next((pc.coll_channels for pc in members if pc.coll_channels is not None), None)
    return Comm(
        id=key,
        nranks=nranks or (max(infos) + 1 if infos else 0),
        ranks=tuple(infos[r] for r in sorted(infos)),
        edges=edges,
        nnodes=nnodes,
        rings_connected=sum(1 for pc in members if pc.rings),
        trees_connected=sum(1 for pc in members if pc.trees),
        coll_channels=coll,
        ended=ended,
        hosts=tuple(sorted({pc.host for pc in members if pc.host})),
        processes=len({pc.proc for pc in members}),
        joined_by="commId" if by_id else "structure",
        # one line may print any nranks or rank (2000000000): the ranks that printed nothing are listed up to a
        # bound, never built whole
        missing=tuple(islice((r for r in range(size) if r not in own), MAX_MISSING)),
    )


MAX_MISSING = 4096
"""Ranks that printed nothing listed per communicator at most (more are a hostile or broken log, not a job)."""


def _place_unranked(members: Iterable[ProcComm], infos: dict[int, RankInfo], bus: dict[int, str]) -> None:
    # a process that printed only "Connected all rings ... busId X": its rank is the one rank with that bus id that
    # no process holds yet and whose host, where known, is its own
    for pc in members:
        if pc.own_ranks() or pc.bus_id is None:
            continue
        fits = [
            r
            for r, b in bus.items()
            if b == pc.bus_id
            and (r not in infos or infos[r].pid is None)
            and infos.get(r, RankInfo(r, None, b, None, None)).host in (None, pc.host)
        ]
        if len(fits) == 1:
            r = fits[0]
            infos[r] = RankInfo(
                r,
                pc.dev,
                pc.bus_id,
                pc.host,
                pc.pid,
                pc.complete_seq is not None,
                pc.init_s,
                pc.ptr,
                phase_name(pc.phase),
            )


def _edges(members: Iterable[ProcComm], hosts: Mapping[int, str], nnodes: int | None = None) -> tuple[Edge, ...]:
    merged: dict[tuple[str, str, str], set[tuple[int, int]]] = {}
    for pc in members:
        for key, seen in pc.edges.items():
            got = merged.setdefault(key, set())
            got.update((int(ch), int(conn or 0)) for ch, conn, _dir in seen)
    out = []
    for (s, d, t), chans in merged.items():
        src, dst = int(s), int(d)
        a, b = hosts.get(src), hosts.get(dst)
        if a and b:
            inter: bool | None = a != b
        elif nnodes == 1 or t.startswith(("P2P", "SHM")):
            inter = False  # one node, or a transport that never leaves one
        else:
            inter = None
        out.append(Edge(src, dst, t, len(chans), inter))
    return tuple(sorted(out, key=lambda e: (e.src, e.dst, e.transport)))
