"""RCCL init output of a tensor-parallel job, as RCCL 2.20 writes it (amd.md §6), for the simulated workers.

A vLLM TP job runs one worker process per GPU; each process prints its own lines with its own ``comm 0x…`` pointer
and no commId; their lines interleave in the one log. Demo mode only: the bus ids are the simulated node's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

RCCL_BANNER = "RCCL version 2.20.5+hip6.2 HEAD:8a5d7e1"
IOMMU_WARN = 'Missing "iommu=pt" from kernel command line which can lead to system instablity or hang!'
_INIT_SRC = "/long_pathname_so_that_rpms_can_package_the_debug_info/src/extlibs/rccl/build/hipify/src/init.cc:136"


@dataclass(frozen=True, slots=True)
class SimRank:
    """One rank's process: where its lines say they come from."""

    host: str
    pid: int
    dev: int
    """HIP device index inside the process (its visible devices start at 0)."""
    bus: str
    """Bus id as RCCL prints it (``85000`` for ``0000:85:00.0``)."""
    ptr: str
    """The process's own communicator pointer."""


def bus_of_bdf(bdf: str) -> str:
    """``0000:85:00.0`` -> ``85000`` (RCCL's ``%lx`` of the address digits)."""
    return f"{int(bdf.replace(':', '').replace('.', ''), 16):x}"


def tp_ranks(host: str, first_pid: int, bdfs: Sequence[str]) -> list[SimRank]:
    """One process per GPU, pids counting up from ``first_pid``, pointers as a heap allocator hands them out."""
    return [
        SimRank(host, first_pid + r, r, bus_of_bdf(bdf), f"0x{0x55D0C0A1B000 + 0x9E40 * (r + 1) + r * 0x1000000:x}")
        for r, bdf in enumerate(bdfs)
    ]


def _head(r: SimRank, main: bool = False) -> str:
    tid = r.pid if main else r.pid + 57
    return f"{r.host}:{r.pid}:{tid} [{r.dev}]"


def rank_phases(
    rank: int, ranks: Sequence[SimRank], transport: Callable[[int, int], str], nchannels: int = 2
) -> list[list[str]]:
    """One rank's lines in phases (startup, topology, connections, completion): interleaving goes phase by phase."""
    me, n = ranks[rank], len(ranks)
    h, h0 = _head(me), _head(me, main=True)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    startup = [f"{h0} NCCL INFO Bootstrap : Using lo:127.0.0.1<0>", "", f"{h0} {_INIT_SRC} NCCL WARN {IOMMU_WARN}"]
    suffix = f"comm {me.ptr} nRanks {n:02d}"
    topo = [
        f"{h} NCCL INFO Trees [0] {nxt}/-1/-1->{rank}->{prv} [1] {prv}/-1/-1->{rank}->{nxt} {suffix} busId {me.bus}"
    ]
    if rank == 0:
        ring = "".join(f"{r:>4}" for r in range(n))
        topo = [f"{h} NCCL INFO Channel {c:02d}/{nchannels:02d} : {ring}" for c in range(nchannels)] + topo
    conns = []
    for c in range(nchannels):
        t = transport(rank, nxt)
        chan = f"{c:02d}" if t.startswith("SHM") else f"{c:02d}/0"
        conns.append(f"{h} NCCL INFO Channel {chan} : {rank}[{me.bus}] -> {nxt}[{ranks[nxt].bus}] via {t} {suffix}")
    conns.append(f"{h} NCCL INFO Connected all rings {suffix} busId {me.bus}")
    done = [
        f"{h} NCCL INFO Connected all trees",
        f"{h} NCCL INFO {nchannels} coll channels, {nchannels} p2p channels, 2 p2p channels per peer",
        f"{h} NCCL INFO comm {me.ptr} rank {rank} nranks {n} cudaDev {me.dev} busId {me.bus} used 67129296 bytes"
        " - Init COMPLETE",
    ]
    return [startup, topo, conns, done]


def tp_init_lines(
    ranks: Sequence[SimRank], transport: Callable[[int, int], str] | None = None, nchannels: int = 2
) -> list[str]:
    """The whole job's init output: banner from rank 0, then every rank's phases interleaved rank by rank."""
    if len(ranks) < 2:
        return []
    pick = transport or (lambda _a, _b: "P2P/IPC")
    phases = [rank_phases(r, ranks, pick, nchannels) for r in range(len(ranks))]
    out = [RCCL_BANNER]
    for step in range(len(phases[0])):
        for per_rank in phases:
            out += per_rank[step]
    return out
