"""Turn a :class:`LogReport` into flags: transport fallbacks against the topology, errors and timeouts."""

from __future__ import annotations

from amdtop.hip_devices import bus_devices
from amdtop.logread.rccl.grammar import bus_id_of_bdf, norm_bus_id
from amdtop.logread.rccl.report import Comm, LogReport, Message
from amdtop.model import Flag, FlagKind, Link, LinkType, Topology

FALLBACK_PREFIXES = ("SHM", "NET")
INTRA_GPU_XGMI_WEIGHT = 13
"""KFD io_link weight between two partitions of one GPU (amd.md §5)."""


def device_by_bus_id(topology: Topology | None) -> dict[str, tuple[int, int | None]]:
    """Printed bus id (``c1000``, ``5003`` for partition 3 of ``0000:05:00.0``) -> (GPU index, partition or None)."""
    if topology is None:
        return {}
    return {bus_id_of_bdf(bdf): dev for bdf, dev in bus_devices(topology).items()}


def gpu_by_bus_id(topology: Topology | None) -> dict[str, int]:
    """Printed bus id (``c1000``) -> amdtop GPU index (a partition's bus id gives its GPU)."""
    return {bus: gpu for bus, (gpu, _part) in device_by_bus_id(topology).items()}


def rank_devices(comm: Comm, topology: Topology | None) -> dict[int, tuple[int, int | None]]:
    """Rank -> (GPU index, partition or None) for the ranks whose bus id is one of the topology's devices."""
    by_bus = device_by_bus_id(topology)
    out = {}
    for r in comm.ranks:
        if r.bus_id is not None and norm_bus_id(r.bus_id) in by_bus:
            out[r.rank] = by_bus[norm_bus_id(r.bus_id)]
    return out


def rank_gpus(comm: Comm, topology: Topology | None) -> dict[int, int]:
    """Rank -> GPU index for the ranks whose bus id is one of the topology's GPUs (or their partitions)."""
    return {rank: gpu for rank, (gpu, _part) in rank_devices(comm, topology).items()}


def device_link(topology: Topology, a: tuple[int, int | None], b: tuple[int, int | None]) -> Link | None:
    """The link between two devices: the GPUs' link, or XGMI inside one GPU between two of its partitions.

    KFD links the partitions of one GPU by XGMI io_links of weight 13 (amd.md §5), so P2P between them is expected
    and SHM between them is a fallback like SHM between two XGMI-linked GPUs.
    """
    (ga, pa), (gb, pb) = a, b
    if ga != gb:
        return topology.link(ga, gb)
    if pa is not None and pb is not None and pa != pb:
        return Link(ga, gb, LinkType.XGMI, hops=1, weight=INTRA_GPU_XGMI_WEIGHT)
    return None


def device_text(dev: tuple[int, int | None]) -> str:
    """``3`` or ``3.5`` (partition 5 of GPU 3)."""
    return str(dev[0]) if dev[1] is None else f"{dev[0]}.{dev[1]}"


def _fallbacks(comm: Comm, topology: Topology, worker: str | None) -> list[Flag]:
    devs = rank_devices(comm, topology)
    hosts = {r.rank: r.host for r in comm.ranks}
    bad: dict[str, list[tuple[int, int, tuple[int, int | None], tuple[int, int | None]]]] = {}
    kinds: dict[str, Link] = {}
    for e in comm.edges:
        if not e.transport.startswith(FALLBACK_PREFIXES) or e.src == e.dst:
            continue
        # only pairs inside one node: same host where printed, else a single-node communicator
        same_host = hosts.get(e.src) == hosts.get(e.dst) if hosts.get(e.src) and hosts.get(e.dst) else comm.nnodes == 1
        if not same_host or e.src not in devs or e.dst not in devs:
            continue
        link = device_link(topology, devs[e.src], devs[e.dst])
        if link is None or not link.direct:
            continue
        bad.setdefault(e.transport, []).append((e.src, e.dst, devs[e.src], devs[e.dst]))
        kinds.setdefault(e.transport, link)
    flags = []
    for transport, pairs in bad.items():
        shown = ", ".join(f"rank {s}->{d} (GPU {device_text(a)}->{device_text(b)})" for s, d, a, b in pairs[:4])
        more = f" and {len(pairs) - 4} more" if len(pairs) > 4 else ""
        link = kinds[transport]
        share = (
            f"the partitions share GPU {link.a}'s internal XGMI"
            if link.a == link.b
            else f"the GPUs share a direct {link.type.value} link"
        )
        msg = (
            f"{comm_label(comm)}: {shown}{more} go through {transport} although {share}; "
            "P2P is disabled (NCCL_P2P_DISABLE/NCCL_P2P_LEVEL) or failed"
        )
        gpu_set = sorted({dev[0] for p in pairs for dev in p[2:]})
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
            tail passes False; :class:`amdtop.logread.rccl.monitor.LogMonitor` judges stalls by time instead.
    """
    from amdtop.logread.rccl.failures import incomplete_flags, nic_flags

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
        # ``[N]`` of a line head is the printing device: a rank only where the process's lines named one
        who = f" rank {m.rank}" if m.rank is not None else (f" device [{m.dev}]" if m.dev is not None else "")
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
    devs = rank_devices(comm, topology)
    kinds = set()
    for e in comm.edges:
        if e.transport.startswith("P2P") and e.src in devs and e.dst in devs and devs[e.src] != devs[e.dst]:
            link = device_link(topology, devs[e.src], devs[e.dst])
            kinds.add(link.type.value if link else "?")
    transports = {e.transport for e in comm.edges}
    if len(kinds) == 1 and len(transports) == 1:
        t = next(iter(transports))
        text = text.replace(f"all pairs {t}", f"all pairs {t} over {next(iter(kinds))}", 1)
    if comm.ranks and len(devs) == len(comm.ranks):
        text += " (GPUs " + ",".join(device_text(devs[r.rank]) for r in comm.ranks) + ")"
    return text
