"""What the parser extracts from RCCL/NCCL debug logs: frozen values and their contract JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amdtop.logread.incidents.model import Incident, incident_json
from amdtop.logread.rccl.nics import HostNics
from amdtop.logread.rccl.phases import PHASES


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One rank of a communicator."""

    rank: int
    """Rank within the communicator."""
    dev: int | None
    """HIP/CUDA device index the rank runs on (``cudaDev``)."""
    bus_id: str | None
    """PCI bus id as RCCL/NCCL print it: hex ``%lx`` of the digits of ``dddd:bb:dd.f`` (``c1000``)."""
    host: str | None
    """Host name from the line prefix (cut at the first dot)."""
    pid: int | None
    """Process id from the line prefix."""
    init_complete: bool = False
    """True once the rank printed ``Init COMPLETE``."""
    init_s: float | None = None
    """Total init time in seconds where the library printed ``Init timings``."""
    ptr: str | None = None
    """The rank's ``comm 0x…`` pointer: an address inside its own process, not an id of the communicator."""
    phase: str | None = None
    """Furthest init phase the rank printed (:data:`amdtop.logread.rccl.phases.PHASES`); ``None``: it printed no init line."""


@dataclass(frozen=True, slots=True)
class Edge:
    """Connections from one rank to another over one transport."""

    src: int
    """Sending rank."""
    dst: int
    """Receiving rank."""
    transport: str
    """Transport as printed (``P2P/IPC``, ``SHM/direct/direct``, ``NET/IB/0/GDRDMA``...)."""
    channels: int
    """Distinct channels using this connection."""
    inter_node: bool | None = None
    """True when the two ranks sit on different hosts (NET there is expected, not a fallback); ``None``: unknown."""


@dataclass(frozen=True, slots=True)
class Comm:
    """A communicator, merged over every rank's lines."""

    id: str
    """``commId`` where printed, else a synthetic ``comm-<n>`` (the ranks were joined by what their lines share)."""
    nranks: int
    """Number of ranks."""
    ranks: tuple[RankInfo, ...]
    """Ranks seen, by rank."""
    edges: tuple[Edge, ...]
    """Rank-pair connections, sorted by (src, dst, transport)."""
    nnodes: int | None = None
    """Number of nodes the communicator spans, where printed."""
    rings_connected: int = 0
    """Ranks that printed ``Connected all rings``."""
    trees_connected: int = 0
    """Ranks that printed ``Connected all trees``."""
    coll_channels: int | None = None
    """Collective channels (``N coll channels``)."""
    ended: str | None = None
    """``destroyed`` or ``aborted`` once a rank printed the teardown line."""
    hosts: tuple[str, ...] = ()
    """Hosts its ranks print from, sorted."""
    processes: int = 0
    """Processes (host, pid) whose lines were joined into this communicator."""
    joined_by: str = "commId"
    """``commId`` (printed) or ``structure`` (nRanks, ranks, bus ids and init order of per-process pointers)."""
    missing: tuple[int, ...] = ()
    """Ranks below ``nranks`` that printed no line of their own (peers name them, or nothing does)."""

    @property
    def init_complete(self) -> int:
        """Ranks that printed ``Init COMPLETE``."""
        return sum(1 for r in self.ranks if r.init_complete)

    @property
    def last_phase(self) -> str | None:
        """Where init stands: the phase of the least advanced rank that printed one (``complete`` when all did)."""
        reached = [PHASES.index(r.phase) for r in self.ranks if r.phase is not None]
        if not reached:
            return None
        return PHASES[min(reached)]

    @property
    def stuck_ranks(self) -> tuple[int, ...]:
        """Ranks that printed init lines but no ``Init COMPLETE``."""
        return tuple(r.rank for r in self.ranks if r.phase is not None and not r.init_complete)

    @property
    def init_incomplete(self) -> bool:
        """A rank started init and never completed it, and nobody tore the communicator down. Ranks that printed
        nothing alone do not count: their files are often just not in the set."""
        return bool(self.stuck_ranks) and self.ended is None

    @property
    def summary(self) -> str:
        """One line: ``4 ranks, all pairs P2P/IPC`` or the mix of transports."""
        head = f"{self.nranks} rank{'s' if self.nranks != 1 else ''}"
        hosts = set(self.hosts) or {r.host for r in self.ranks if r.host}
        if len(hosts) > 1 or (self.nnodes or 1) > 1:
            head += f" on {max(len(hosts), self.nnodes or 0)} nodes"
            if len(hosts) > 1:
                head += f" ({', '.join(sorted(hosts))})"
        pairs: dict[str, set[tuple[int, int]]] = {}
        for e in self.edges:
            label = f"{e.transport} inter-node" if e.inter_node else e.transport
            pairs.setdefault(label, set()).add((min(e.src, e.dst), max(e.src, e.dst)))
        if not pairs:
            text = f"{head}, no peers" if self.nranks == 1 else f"{head}, no transport lines seen"
        elif len(pairs) == 1:
            text = f"{head}, all pairs {next(iter(pairs))}"
        else:
            mix = ", ".join(
                f"{len(p)} pair{'s' if len(p) > 1 else ''} {t}"
                for t, p in sorted(pairs.items(), key=lambda kv: -len(kv[1]))
            )
            text = f"{head}, {mix}"
        done = self.init_complete
        if self.ranks and done < self.nranks:
            text += f" (init complete on {done}/{self.nranks})"
        if self.ended:
            text += f" ({self.ended})"
        return text


@dataclass(frozen=True, slots=True)
class Message:
    """A warning or error with where it was read."""

    file: str
    """File it was read from."""
    line: int
    """1-based line number."""
    text: str
    """The message (prefix stripped for WARNs, whole line otherwise)."""
    kind: str = "warn"
    """``warn``, ``nccl_error``, ``error_trail``, ``watchdog_timeout``, ``exception``."""
    rank: int | None = None
    """Rank or device concerned where the line says."""
    extra: tuple[tuple[str, Any], ...] = ()
    """More facts (``seq``, ``op``, ``timeout_ms``, ``ran_ms``, ``result``...)."""
    host: str | None = None
    """Host of the printing process, where the line says."""
    pid: int | None = None
    """Pid of the printing process, where the line says."""
    dev: int | None = None
    """Device index of the printing thread (``[0]`` in the line head), where the line says."""


@dataclass(frozen=True, slots=True)
class WarningGroup:
    """Identical warnings printed by several ranks and processes (RCCL repeats its startup WARNs per process)."""

    text: str
    """The warning text."""
    kind: str
    """``warn`` or ``unknown_env``."""
    count: int
    """Lines carrying it."""
    ranks: tuple[int, ...]
    """Ranks (or devices) that printed it, sorted."""
    processes: int
    """Distinct processes (host, pid) that printed it."""
    hosts: tuple[str, ...]
    """Hosts that printed it."""
    file: str
    """File of the first occurrence."""
    line: int
    """Line of the first occurrence."""
    source: str | None = None
    """RCCL/NCCL source location (``src/init.cc:179``) where printed."""


@dataclass(frozen=True, slots=True)
class EnvSetting:
    """A variable the library echoed as ``set by environment``."""

    name: str
    """Variable name."""
    value: str
    """Value as echoed (trailing ``.`` removed)."""
    known: bool
    """False for names RCCL/NCCL do not read (e.g. ``RCCL_ENABLE_XGMI``): set but ignored."""


@dataclass(frozen=True, slots=True)
class LogReport:
    """Everything extracted from one or more log files."""

    library: str | None
    """``RCCL`` or ``NCCL`` (``None`` when no line says)."""
    version: str | None
    """Library version (``2.22.3``)."""
    files: int
    """Files read."""
    lines: int
    """Lines read."""
    unknown_lines: int
    """Lines that matched no known form (counted, never fatal)."""
    comms: tuple[Comm, ...]
    """Communicators, in order of first appearance."""
    transports: tuple[tuple[str, int], ...]
    """Connections per transport (channel x pair), most used first."""
    warnings: tuple[Message, ...]
    """WARN lines."""
    errors: tuple[Message, ...]
    """Errors: ``NCCL Error``, error trails, watchdog timeouts, distributed exceptions."""
    env: tuple[EnvSetting, ...] = ()
    """Variables echoed as ``set by environment``."""
    versions: tuple[tuple[str, str], ...] = field(default=())
    """Other versions printed in banners (``HIP``, ``ROCm``, ``vllm-nccl``)."""
    notes: tuple[Message, ...] = ()
    """Return-code traces that led to nothing (a probe that failed and fell back): informational, not errors."""
    warning_groups: tuple[WarningGroup, ...] = ()
    """:attr:`warnings` grouped by identical text, most printed first."""
    nics: tuple[HostNics, ...] = ()
    """NICs per host from the network lines (``NET/IB : Using ...``), sorted by host."""
    incidents: tuple[Incident, ...] = ()
    """One verdict per incident (a collective timeout across ranks, a fabric failure, a crashed worker)."""
    dropped: int = 0
    """Messages not kept because a list was full (:data:`amdtop.logread.rccl.capped.MAX_KEPT`; a log repeating one line
    without end), plus catalog lines of a new scope beyond the reader's bound: counted, so nothing is lost silently."""


def report_json(report: LogReport, flags: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``logs parse --json`` document (contract keys plus summaries, env, notes, warning groups and flags)."""

    def msg(m: Message) -> dict[str, Any]:
        doc: dict[str, Any] = {"file": m.file, "line": m.line, "text": m.text, "kind": m.kind}
        if m.rank is not None:
            doc["rank"] = m.rank
        if m.host is not None:
            doc["host"] = m.host
        if m.pid is not None:
            doc["pid"] = m.pid
        if m.dev is not None:
            doc["dev"] = m.dev
        doc.update(dict(m.extra))
        return doc

    return {
        "library": report.library,
        "version": report.version,
        "files": report.files,
        "lines": report.lines,
        "unknown_lines": report.unknown_lines,
        "dropped_messages": report.dropped,
        "comms": [comm_json(c) for c in report.comms],
        "transports": dict(report.transports),
        "warnings": [msg(m) for m in report.warnings],
        "warning_groups": [
            {
                "text": g.text,
                "kind": g.kind,
                "count": g.count,
                "ranks": list(g.ranks),
                "processes": g.processes,
                "hosts": list(g.hosts),
                "file": g.file,
                "line": g.line,
                "source": g.source,
            }
            for g in report.warning_groups
        ],
        "errors": [msg(m) for m in report.errors],
        "notes": [msg(m) for m in report.notes],
        "env": [{"name": e.name, "value": e.value, "known": e.known} for e in report.env],
        "versions": dict(report.versions),
        "nics": {h.host: list(h.devices) for h in report.nics},
        "nic_lists": {
            h.host: {"network": h.network, "listed": {source: list(d) for source, d in h.listed}} for h in report.nics
        },
        "flags": flags or [],
        "incidents": [incident_json(i) for i in report.incidents],
    }


def comm_json(c: Comm) -> dict[str, Any]:
    """One communicator of the ``logs parse --json`` document."""
    return {
        "id": c.id,
        "nranks": c.nranks,
        "nnodes": c.nnodes,
        "hosts": list(c.hosts),
        "processes": c.processes,
        "joined_by": c.joined_by,
        "summary": c.summary,
        "init_complete": c.init_complete,
        "init": {
            "complete": c.init_complete,
            "nranks": c.nranks,
            "last_phase": c.last_phase,
            "phases": {str(r.rank): r.phase for r in c.ranks if r.phase is not None},
            "missing": list(c.missing),
        },
        "ranks": [
            {
                "rank": r.rank,
                "dev": r.dev,
                "bus_id": r.bus_id,
                "host": r.host,
                "pid": r.pid,
                "ptr": r.ptr,
                "init_complete": r.init_complete,
                "init_s": r.init_s,
                "phase": r.phase,
            }
            for r in c.ranks
        ],
        "edges": [
            {"from": e.src, "to": e.dst, "transport": e.transport, "channels": e.channels, "inter_node": e.inter_node}
            for e in c.edges
        ],
        "rings_connected": c.rings_connected,
        "trees_connected": c.trees_connected,
        "coll_channels": c.coll_channels,
        "ended": c.ended,
    }
