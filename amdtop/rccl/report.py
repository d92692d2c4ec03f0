"""What the parser extracts from RCCL/NCCL debug logs: frozen values and their contract JSON."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True, slots=True)
class Comm:
    """A communicator, merged over every rank's lines."""

    id: str
    """``commId`` where printed, else the comm pointer, else a synthetic ``comm-<n>``."""
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

    @property
    def summary(self) -> str:
        """One line: ``4 ranks, all pairs P2P/IPC`` or the mix of transports."""
        head = f"{self.nranks} rank{'s' if self.nranks != 1 else ''}"
        hosts = {r.host for r in self.ranks if r.host}
        if len(hosts) > 1 or (self.nnodes or 1) > 1:
            head += f" on {max(len(hosts), self.nnodes or 0)} nodes"
        pairs: dict[str, set[tuple[int, int]]] = {}
        for e in self.edges:
            pairs.setdefault(e.transport, set()).add((min(e.src, e.dst), max(e.src, e.dst)))
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
        done = sum(1 for r in self.ranks if r.init_complete)
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


def report_json(report: LogReport, flags: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``logs parse --json`` document (contract keys plus summaries, env and flags)."""

    def msg(m: Message) -> dict[str, Any]:
        doc: dict[str, Any] = {"file": m.file, "line": m.line, "text": m.text, "kind": m.kind}
        if m.rank is not None:
            doc["rank"] = m.rank
        doc.update(dict(m.extra))
        return doc

    return {
        "library": report.library,
        "version": report.version,
        "files": report.files,
        "lines": report.lines,
        "unknown_lines": report.unknown_lines,
        "comms": [
            {
                "id": c.id,
                "nranks": c.nranks,
                "nnodes": c.nnodes,
                "summary": c.summary,
                "ranks": [
                    {
                        "rank": r.rank,
                        "dev": r.dev,
                        "bus_id": r.bus_id,
                        "host": r.host,
                        "pid": r.pid,
                        "init_complete": r.init_complete,
                        "init_s": r.init_s,
                    }
                    for r in c.ranks
                ],
                "edges": [
                    {"from": e.src, "to": e.dst, "transport": e.transport, "channels": e.channels} for e in c.edges
                ],
                "rings_connected": c.rings_connected,
                "trees_connected": c.trees_connected,
                "coll_channels": c.coll_channels,
                "ended": c.ended,
            }
            for c in report.comms
        ],
        "transports": dict(report.transports),
        "warnings": [msg(m) for m in report.warnings],
        "errors": [msg(m) for m in report.errors],
        "env": [{"name": e.name, "value": e.value, "known": e.known} for e in report.env],
        "versions": dict(report.versions),
        "flags": flags or [],
    }
