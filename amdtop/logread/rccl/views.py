"""Typed per-worker views of parsed logs, for the one frame (TUI Logs pane, exporter counts, snapshot JSON)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from amdtop.logread.incidents.model import Incident, incident_json
from amdtop.logread.rccl.diagnose import FALLBACK_PREFIXES, comm_summary, device_link, rank_devices, rank_gpus
from amdtop.logread.rccl.report import Comm, LogReport, RankInfo, WarningGroup
from amdtop.model import Flag, Topology


@dataclass(frozen=True, slots=True)
class PairView:
    """One rank pair's connection, placed on the node's GPUs."""

    src: int
    """Sending rank."""
    dst: int
    """Receiving rank."""
    transport: str
    """As printed (``P2P/IPC``, ``SHM/direct``, ``NET/Socket/1``...)."""
    channels: int
    """Distinct channels over it."""
    src_gpu: int | None = None
    """amdtop GPU index of the sending rank (by bus id), ``None`` when not on this node or unknown."""
    dst_gpu: int | None = None
    """amdtop GPU index of the receiving rank."""
    link: str | None = None
    """Topology link type between the two GPUs (``XGMI``, ``PCIE``...) where known."""
    inter_node: bool | None = None
    """True between hosts: NET there is expected."""
    fallback: bool = False
    """SHM or NET between two GPUs of this node that share a direct link."""
    src_partition: int | None = None
    """Compute partition of ``src_gpu`` the sending rank runs on (a partitioned node), else ``None``."""
    dst_partition: int | None = None
    """Compute partition of ``dst_gpu`` the receiving rank runs on."""


@dataclass(frozen=True, slots=True)
class CommView:
    """One communicator of a worker, joined over its processes."""

    id: str
    """commId, or ``comm-<n>`` when joined by structure."""
    nranks: int
    """Ranks it has."""
    summary: str
    """One line (``4 ranks, all pairs P2P/IPC over XGMI (GPUs 0,1,2,3)``)."""
    ranks: tuple[RankInfo, ...]
    """Ranks with host, pid, device, bus id, pointer and init state."""
    gpus: tuple[int | None, ...]
    """amdtop GPU index per entry of :attr:`ranks`."""
    hosts: tuple[str, ...]
    """Hosts its ranks run on."""
    pairs: tuple[PairView, ...]
    """Every rank pair's transport."""
    init_complete: int
    """Ranks that completed init."""
    rings_connected: int
    """Ranks that printed ``Connected all rings``."""
    ended: str | None = None
    """``destroyed`` / ``aborted`` once torn down."""


@dataclass(frozen=True, slots=True)
class WorkerLogs:
    """What one worker's RCCL/NCCL logs say."""

    worker: str
    """Worker (TP group) name."""
    library: str | None
    """``RCCL`` / ``NCCL``."""
    version: str | None
    """Library version."""
    comms: tuple[CommView, ...]
    """Communicators, in order of first appearance."""
    warning_groups: tuple[WarningGroup, ...]
    """Identical warnings grouped with rank and process counts."""
    errors: int
    """Error messages (NCCL errors, failed traces, watchdog timeouts, exceptions): the exporter's ``rccl_errors``."""
    warnings: int
    """WARN lines: the exporter's ``rccl_warnings``."""
    notes: int
    """Return-code traces judged harmless (a probe that fell back)."""
    lines: int
    """Lines parsed."""
    unknown_lines: int
    """Lines that matched no known form."""
    flags: tuple[Flag, ...]
    """Flags from these logs (errors, timeouts, fallbacks), each with this worker and the GPUs concerned."""
    incidents: tuple[Incident, ...] = ()
    """One verdict per incident these logs tell (the parser's, with this worker set)."""


def comm_view(comm: Comm, topology: Topology | None) -> CommView:
    """:class:`CommView` of ``comm`` on ``topology`` (GPU indices and link types where the bus ids are the node's)."""
    gpus = rank_gpus(comm, topology)
    devs = rank_devices(comm, topology)
    hosts = {r.rank: r.host for r in comm.ranks}
    pairs = []
    for e in comm.edges:
        a, b = gpus.get(e.src), gpus.get(e.dst)
        da, db = devs.get(e.src), devs.get(e.dst)
        link = device_link(topology, da, db) if topology is not None and da is not None and db is not None else None
        same_host = not e.inter_node and (hosts.get(e.src) == hosts.get(e.dst) or comm.nnodes == 1)
        fallback = bool(link and link.direct and same_host and e.transport.startswith(FALLBACK_PREFIXES))
        kind = link.type.value if link else None
        pa, pb = (da[1] if da else None), (db[1] if db else None)
        pairs.append(PairView(e.src, e.dst, e.transport, e.channels, a, b, kind, e.inter_node, fallback, pa, pb))
    return CommView(
        id=comm.id,
        nranks=comm.nranks,
        summary=comm_summary(comm, topology),
        ranks=comm.ranks,
        gpus=tuple(gpus.get(r.rank) for r in comm.ranks),
        hosts=comm.hosts,
        pairs=tuple(pairs),
        init_complete=comm.init_complete,
        rings_connected=comm.rings_connected,
        ended=comm.ended,
    )


ViewCache = dict[int, tuple[Comm, CommView]]
"""Communicator views by the id of the frozen :class:`Comm` they show (reused while the parser reuses the Comm)."""


def worker_logs(
    worker: str,
    report: LogReport,
    topology: Topology | None,
    flags: tuple[Flag, ...],
    cache: ViewCache | None = None,
) -> WorkerLogs:
    """The typed view of one worker's report; ``cache`` keeps the views of communicators that did not change."""
    if cache is None:
        views = tuple(comm_view(c, topology) for c in report.comms)
    else:
        fresh: ViewCache = {}
        out = []
        for c in report.comms:
            got = cache.get(id(c))
            view = got[1] if got is not None and got[0] is c else comm_view(c, topology)
            fresh[id(c)] = (c, view)
            out.append(view)
        cache.clear()
        cache.update(fresh)
        views = tuple(out)
    return WorkerLogs(
        worker=worker,
        library=report.library,
        version=report.version,
        comms=views,
        warning_groups=report.warning_groups,
        errors=len(report.errors),
        warnings=len(report.warnings),
        notes=len(report.notes),
        lines=report.lines,
        unknown_lines=report.unknown_lines,
        flags=flags,
        incidents=tuple(replace(i, worker=worker) for i in report.incidents),
    )


def worker_logs_json(w: WorkerLogs) -> dict[str, Any]:
    """One worker's logs for ``snapshot --json`` (same key names as ``logs parse --json`` where they overlap)."""
    return {
        "worker": w.worker,
        "library": w.library,
        "version": w.version,
        "lines": w.lines,
        "unknown_lines": w.unknown_lines,
        "errors": w.errors,
        "warnings": w.warnings,
        "notes": w.notes,
        "comms": [
            {
                "id": c.id,
                "nranks": c.nranks,
                "summary": c.summary,
                "hosts": list(c.hosts),
                "init_complete": c.init_complete,
                "rings_connected": c.rings_connected,
                "ended": c.ended,
                "ranks": [
                    {"rank": r.rank, "gpu": g, "dev": r.dev, "bus_id": r.bus_id, "host": r.host, "pid": r.pid}
                    for r, g in zip(c.ranks, c.gpus, strict=True)
                ],
                "edges": [
                    {
                        "from": p.src,
                        "to": p.dst,
                        "transport": p.transport,
                        "channels": p.channels,
                        "gpus": [p.src_gpu, p.dst_gpu],
                        "link": p.link,
                        "inter_node": p.inter_node,
                        "fallback": p.fallback,
                    }
                    for p in c.pairs
                ],
            }
            for c in w.comms
        ],
        "warning_groups": [
            {"text": g.text, "count": g.count, "ranks": list(g.ranks), "processes": g.processes}
            for g in w.warning_groups
        ],
        "incidents": [incident_json(i) for i in w.incidents],
    }
