"""Turn a :class:`LogReport` into flags: transport fallbacks against the topology, errors and timeouts."""

from __future__ import annotations

from amdtop.model import Flag, FlagKind, Topology
from amdtop.rccl.grammar import bus_id_of_bdf, norm_bus_id
from amdtop.rccl.report import Comm, LogReport, Message

FALLBACK_PREFIXES = ("SHM", "NET")


def gpu_by_bus_id(topology: Topology | None) -> dict[str, int]:
    """Printed bus id (``c1000``) -> amdtop GPU index."""
    if topology is None:
        return {}
    return {bus_id_of_bdf(g.bdf): g.index for g in topology.gpus}


def rank_gpus(comm: Comm, topology: Topology | None) -> dict[int, int]:
    """Rank -> GPU index for the ranks whose bus id is one of the topology's GPUs."""
    by_bus = gpu_by_bus_id(topology)
    out = {}
    for r in comm.ranks:
        if r.bus_id is not None and norm_bus_id(r.bus_id) in by_bus:
            out[r.rank] = by_bus[norm_bus_id(r.bus_id)]
    return out


def _fallbacks(comm: Comm, topology: Topology, worker: str | None) -> list[Flag]:
    gpus = rank_gpus(comm, topology)
    hosts = {r.rank: r.host for r in comm.ranks}
    bad: dict[str, list[tuple[int, int, int, int]]] = {}
    for e in comm.edges:
        if not e.transport.startswith(FALLBACK_PREFIXES) or e.src == e.dst:
            continue
        # only pairs inside one node: same host where printed, else a single-node communicator
        same_host = hosts.get(e.src) == hosts.get(e.dst) if hosts.get(e.src) and hosts.get(e.dst) else comm.nnodes == 1
        if not same_host or e.src not in gpus or e.dst not in gpus:
            continue
        link = topology.link(gpus[e.src], gpus[e.dst])
        if link is None or not link.direct:
            continue
        bad.setdefault(e.transport, []).append((e.src, e.dst, gpus[e.src], gpus[e.dst]))
    flags = []
    for transport, pairs in bad.items():
        shown = ", ".join(f"rank {s}->{d} (GPU {a}->{b})" for s, d, a, b in pairs[:4])
        more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
        link_type = topology.link(pairs[0][2], pairs[0][3])
        kind = link_type.type.value if link_type else "direct"
        msg = (
            f"{comm_label(comm)}: {shown}{more} go through {transport} although the GPUs share a direct {kind} link; "
            "P2P is disabled (NCCL_P2P_DISABLE/NCCL_P2P_LEVEL) or failed"
        )
        gpu_set = sorted({g for p in pairs for g in p[2:]})
        extra = (("comm", comm.id), ("transport", transport), ("pairs", tuple((s, d) for s, d, _a, _b in pairs)))
        flags.append(Flag(FlagKind.TRANSPORT_FALLBACK, msg, worker, tuple(gpu_set), extra=extra))
    return flags


def comm_label(comm: Comm) -> str:
    """``comm 0x…`` for a printed commId, else the synthetic name as is (``comm-1``)."""
    return comm.id if comm.id.startswith("comm-") else f"comm {comm.id}"


def _error_gpus(report: LogReport, topology: Topology | None, m: Message) -> tuple[int, ...]:
    # the GPU of the process that printed it; else every GPU of the worker's communicators (its TP group)
    by_bus = gpu_by_bus_id(topology)
    if not by_bus:
        return ()
    everyone: set[int] = set()
    for comm in report.comms:
        for r in comm.ranks:
            gpu = by_bus.get(norm_bus_id(r.bus_id)) if r.bus_id else None
            if gpu is None:
                continue
            if m.pid is not None and (r.host, r.pid) == (m.host, m.pid):
                return (gpu,)
            everyone.add(gpu)
    return tuple(sorted(everyone))


def diagnose(
    report: LogReport, topology: Topology | None, worker: str | None = None, *, finished: bool = True
) -> list[Flag]:
    """Flags for one report: errors and timeouts first (they need action now), then inits that never completed,
    NIC lists that differ between hosts, then transport fallbacks.

    Return-code traces judged harmless (``report.notes``) raise no flag. The same fatal text printed by several
    ranks (every rank's ``hipIpcGetMemHandle failed``) is one flag naming them all.

    Args:
        report: parsed logs.
        topology: the node's topology; without it no fallback can be judged (errors are still flagged).
        worker: worker the logs belong to, copied into the flags.
        finished: the logs are complete (``logs parse``): an init without ``Init COMPLETE`` never completed. A live
            tail passes False; :class:`amdtop.rccl.monitor.LogMonitor` judges stalls by time instead.
    """
    from amdtop.rccl.failures import incomplete_flags, nic_flags

    flags: list[Flag] = []
    fatal: dict[tuple[str, str], list[Message]] = {}
    for m in report.errors:
        if m.kind in FATAL_KINDS:
            fatal.setdefault((m.kind, m.text), []).append(m)
            continue
        flags.append(_error_flag(report, topology, worker, [m]))
    flags[:0] = [_error_flag(report, topology, worker, ms) for ms in fatal.values()]
    if finished:
        flags.extend(incomplete_flags(report, topology, worker))
    flags.extend(nic_flags(report, worker))
    if topology is not None:
        for comm in report.comms:
            flags.extend(_fallbacks(comm, topology, worker))
    return flags


FATAL_KINDS = frozenset({"fatal_warn", "fatal_error", "comm_aborted"})
"""Error kinds printed once per rank with the same text: flagged once with every rank and process."""


def _error_flag(report: LogReport, topology: Topology | None, worker: str | None, ms: list[Message]) -> Flag:
    m = ms[0]
    kind = FlagKind.NCCL_TIMEOUT if m.kind == "watchdog_timeout" else FlagKind.NCCL_ERROR
    where = f"{m.file}:{m.line}"
    ranks = sorted({x.rank for x in ms if x.rank is not None})
    procs = sorted({(x.host or "", x.pid or 0) for x in ms if x.host is not None or x.pid is not None})
    if len(ms) == 1:
        who = f" rank {m.rank}" if m.rank is not None else ""
    else:
        who = f" on rank{'s' if len(ranks) > 1 else ''} {','.join(map(str, ranks))}" if ranks else ""
        who += f" ({len(ms)} lines, {len(procs)} process{'es' if len(procs) != 1 else ''})"
    extra: tuple[tuple[str, object], ...] = (("file", m.file), ("line", m.line), ("error_kind", m.kind), *m.extra)
    if len(ranks) == 1:
        extra = (*extra, ("rank", ranks[0]))
    elif ranks:
        extra = (*extra, ("ranks", tuple(ranks)))
    if procs:
        extra = (*extra, ("processes", tuple(f"{h}:{p}" if p else h for h, p in procs)))
    gpus = tuple(sorted({g for x in ms for g in _error_gpus(report, topology, x)}))
    return Flag(kind, f"{m.kind}{who} at {where}: {m.text[:200]}", worker, gpus, extra=extra)


def comm_summary(comm: Comm, topology: Topology | None) -> str:
    """:attr:`Comm.summary` enriched with the node's view: ``4 ranks, all pairs P2P/IPC over XGMI (GPUs 0-3)``."""
    text = comm.summary
    if topology is None:
        return text
    gpus = rank_gpus(comm, topology)
    kinds = set()
    for e in comm.edges:
        if e.transport.startswith("P2P") and e.src in gpus and e.dst in gpus and gpus[e.src] != gpus[e.dst]:
            link = topology.link(gpus[e.src], gpus[e.dst])
            kinds.add(link.type.value if link else "?")
    transports = {e.transport for e in comm.edges}
    if len(kinds) == 1 and len(transports) == 1:
        t = next(iter(transports))
        text = text.replace(f"all pairs {t}", f"all pairs {t} over {next(iter(kinds))}", 1)
    if comm.ranks and len(gpus) == len(comm.ranks):
        text += " (GPUs " + ",".join(str(gpus[r.rank]) for r in comm.ranks) + ")"
    return text
