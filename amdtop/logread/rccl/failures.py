"""Flags for communicators that never finished init and for hosts of one job whose NIC lists differ.

An init that stops (a finished file: ``nccl_init_incomplete``; a live tail quiet for too long: ``nccl_init_stalled``,
raised by :class:`amdtop.logread.rccl.monitor.LogMonitor`) is reported with the phase each rank reached, the ranks that
printed nothing, and the warnings and errors printed before it as the likely cause (RCCL's own advice WARNs, e.g.
``Missing "iommu=pt"``, name the kernel settings under which P2P/IPC hangs).
"""

from __future__ import annotations

from amdtop.logread.rccl.diagnose import comm_label, rank_gpus
from amdtop.logread.rccl.nics import mismatch
from amdtop.logread.rccl.report import Comm, LogReport, Message
from amdtop.logread.rccl.verdicts import is_advisory
from amdtop.model import Flag, FlagKind, Topology

MAX_CAUSES = 3


def ranges(ranks: list[int] | tuple[int, ...]) -> str:
    """``0-4,7,9``: ranks as short ranges."""
    out: list[str] = []
    items = sorted(ranks)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def likely_causes(report: LogReport, comm: Comm) -> tuple[str, ...]:
    """Errors, then WARNs (non-advisory first) printed by the communicator's processes; every WARN where none of
    theirs is known. Each text once, with how many lines carried it."""
    procs = {(r.host, r.pid) for r in comm.ranks if r.host is not None or r.pid is not None}

    def mine(m: Message) -> bool:
        return (m.host, m.pid) in procs

    errors = [m for m in report.errors if mine(m)]
    warns = [m for m in report.warnings if mine(m)] or list(report.warnings)
    warns.sort(key=lambda m: is_advisory(m.text))
    counts: dict[str, int] = {}
    for m in (*errors, *warns):
        counts[m.text] = counts.get(m.text, 0) + 1
    return tuple(f"{text[:160]} (x{n})" if n > 1 else text[:160] for text, n in list(counts.items())[:MAX_CAUSES])


def init_flag(
    report: LogReport, comm: Comm, topology: Topology | None, worker: str | None, kind: FlagKind, quiet_s: float | None
) -> Flag:
    """One flag for a communicator whose init did not complete (``kind``: incomplete or stalled)."""
    stuck = [r for r in comm.ranks if r.phase is not None and not r.init_complete]
    by_phase: dict[str, list[int]] = {}
    for r in stuck:
        by_phase.setdefault(r.phase or "?", []).append(r.rank)
    where = "; ".join(f"rank{'s' if len(v) > 1 else ''} {ranges(v)} at {p}" for p, v in by_phase.items())
    head = f"{comm_label(comm)}: init {'stalled' if kind is FlagKind.NCCL_INIT_STALLED else 'never completed'}"
    if quiet_s is not None:
        head += f" (no progress for {quiet_s:g} s)"
    parts = [f"{head}: {comm.init_complete}/{comm.nranks} ranks complete"]
    if where:
        parts.append(where)
    if comm.missing:
        parts.append(f"rank{'s' if len(comm.missing) > 1 else ''} {ranges(comm.missing)} printed nothing")
    causes = likely_causes(report, comm)
    if causes:
        more = f" (+{len(causes) - 1} more)" if len(causes) > 1 else ""
        parts.append(f"printed before: {causes[0]}{more}")
    gpus = rank_gpus(comm, topology)
    extra: tuple[tuple[str, object], ...] = (
        ("comm", comm.id),
        ("complete", comm.init_complete),
        ("nranks", comm.nranks),
        ("last_phase", comm.last_phase),
        ("phases", tuple((r.rank, r.phase) for r in comm.ranks if r.phase is not None)),
        ("stuck_ranks", tuple(r.rank for r in stuck)),
        ("missing_ranks", comm.missing),
        ("likely_causes", causes),
    )
    if quiet_s is not None:
        extra = (*extra, ("stalled_after_s", quiet_s))
    if len(stuck) == 1:
        extra = (*extra, ("rank", stuck[0].rank))
    gpu_set = tuple(sorted({gpus[r.rank] for r in stuck if r.rank in gpus}))
    return Flag(kind, "; ".join(parts), worker, gpu_set, extra=extra)


def explained(report: LogReport, comm: Comm) -> bool:
    """Every stuck rank's process printed an error: the error flags already say why init stopped."""
    failed = {(m.host, m.pid) for m in report.errors if m.host is not None or m.pid is not None}
    stuck = [r for r in comm.ranks if r.rank in comm.stuck_ranks]
    return bool(stuck) and all((r.host, r.pid) in failed for r in stuck)


def incomplete_flags(report: LogReport, topology: Topology | None, worker: str | None) -> list[Flag]:
    """``nccl_init_incomplete`` for each communicator of a finished file whose init never completed (and whose stuck
    ranks printed no error that already says why)."""
    return [
        init_flag(report, c, topology, worker, FlagKind.NCCL_INIT_INCOMPLETE, None)
        for c in report.comms
        if c.init_incomplete and not explained(report, c)
    ]


def nic_flags(report: LogReport, worker: str | None) -> list[Flag]:
    """``nic_mismatch`` when the hosts of this set of logs list different NICs for the network they use."""
    short = mismatch(report.nics)
    if not short:
        return []
    counts = {h.host: len(h.devices) for h in report.nics if h.devices}
    listed = ", ".join(f"{h} {n}" for h, n in counts.items())
    lacking = "; ".join(f"{h} lacks {', '.join(d)}" for h, d in short)
    msg = f"hosts list different NICs ({listed}): {lacking}; a rail without a peer slows or hangs the job"
    extra = (
        ("hosts", tuple(counts)),
        ("nics", tuple((h.host, h.devices) for h in report.nics if h.devices)),
        ("missing", short),
    )
    return [Flag(FlagKind.NIC_MISMATCH, msg, worker, (), extra=extra)]
