"""Mutable state the parser fills: one :class:`ProcComm` per communicator *per process*, and the error traces.

``comm 0x…`` is a pointer inside one process (amd.md §6): an 8-rank vLLM TP job prints eight of them, one per worker
process. The parser keeps them apart here; :mod:`amdtop.logread.rccl.join` joins them into communicators afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from amdtop.logread.rccl.report import Message

ProcKey = tuple[str | None, int | None]
"""``(host, pid)`` of a process."""
ThreadKey = tuple[str | None, int | None, int | None]
"""``(host, pid, tid)`` of a thread (``tid`` None: the process's newest)."""


@dataclass(slots=True, eq=False)
class ProcComm:
    """One process's view of one communicator: its own rank(s), what it printed about its peers and connections."""

    host: str | None
    pid: int | None
    ptr: str | None
    seq: int
    """Global line sequence number of its first line (init order in time)."""
    nranks: int = 0
    rank: int | None = None
    dev: int | None = None
    bus_id: str | None = None
    comm_id: str | None = None
    started_seq: int | None = None
    complete_seq: int | None = None
    init_s: float | None = None
    ended: str | None = None
    nnodes: int | None = None
    coll_channels: int | None = None
    rings: bool = False
    trees: bool = False
    phase: int = -1
    """Furthest init phase printed (an index of :data:`amdtop.logread.rccl.phases.PHASES`; -1: none)."""
    printers: set[int] = field(default_factory=set)
    """Ranks that printed its channel/tree lines (its own ranks when no Init line says)."""
    peers: dict[int, str] = field(default_factory=dict)
    """Rank -> bus id, from channel lines whose brackets are bus ids (RCCL's ``comm … nRanks`` suffix)."""
    edges: dict[tuple[str, str, str], set[tuple[str, str | None, str | None]]] = field(default_factory=dict)
    """(src, dst, transport) -> (channel, connIndex, direction) seen, as raw strings (ints are made at report time)."""

    @property
    def proc(self) -> ProcKey:
        return (self.host, self.pid)

    def own_ranks(self) -> set[int]:
        """Ranks this process holds in the communicator."""
        return {self.rank} if self.rank is not None else set(self.printers)


@dataclass(slots=True)
class Trace:
    """A return-code trace (``NCCL INFO <file>:<line> -> <code>`` hops of one thread) awaiting its verdict."""

    message: Message
    thread: ThreadKey
    first_seq: int
    last_seq: int
    comm: ProcComm | None
    """The communicator the thread or process was initialising when the trace started."""
