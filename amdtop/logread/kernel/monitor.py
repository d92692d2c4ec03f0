"""Kernel faults into ``gpu_fault`` flags: read the source each tick, parse, map to GPU/worker/rank, keep each fault
(repeats counted) for :data:`GPU_FAULT_HOLD_S` after a line of it was last read."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from amdtop.logread.incidents.model import Incident
from amdtop.logread.kernel.events import ADVICE, LOST, LOST_ADVICE, FaultCause, KernelEvent
from amdtop.logread.kernel.incidents import KernelVerdicts
from amdtop.logread.kernel.mapper import FaultMapper, Owner
from amdtop.logread.kernel.parser import KernelLogParser
from amdtop.logread.kernel.sources import KernelSource, SourceUnavailable, open_kernel_source
from amdtop.logread.kernel.worker_logs import WorkerLogFaults
from amdtop.logread.kernel.xid import xid_advice
from amdtop.model import Flag, FlagKind, Topology, WorkerStatus
from amdtop.pcibus import MissingGpu, PciAccelerator, failed, missing_gpus, scan, verdict
from amdtop.thresholds import GPU_FAULT_HOLD_S

_TS = re.compile(r"^\[\s*(\d+\.\d+)\]")
"""The seconds-since-boot stamp dmesg and the ``/dev/kmsg`` reader put before each line."""
_MAX_HISTORY = 64
"""Old faults kept as history (read from before amdtop started, or expired from the live flags)."""
_MAX_FAULTS = 256
"""Distinct faults kept (a storm of page faults from one process is one fault with a count)."""

WHAT: dict[FaultCause, str] = {
    FaultCause.PAGE_FAULT: "page fault",
    FaultCause.UNCORRECTABLE: "uncorrectable error",
    FaultCause.POISON: "RAS poison",
    FaultCause.RESET: "GPU reset",
    FaultCause.HANG: "GPU hang",
    FaultCause.FALLEN_OFF_BUS: "fallen off the bus",
    FaultCause.RESET_FAILED: "reset failed: GPU lost",
    FaultCause.NVLINK: "NVLink error",
    FaultCause.APP_EXCEPTION: "GPU exception in the application's work",
    FaultCause.DRIVER: "driver/firmware error",
    FaultCause.CLEANUP: "channel cleanup after an earlier error",
}


@dataclass(frozen=True, slots=True)
class KernelLogStatus:
    """What the kernel-log reader is doing (``kernel_log`` in ``snapshot --json``)."""

    source: str | None
    """What is read (``/dev/kmsg``, ``journalctl -k``, a path); ``None`` when nothing can be."""
    available: bool
    """False when no kernel log can be read (or the source broke)."""
    note: str | None = None
    """Why it is unavailable, one line."""
    lines: int = 0
    """Lines read so far."""
    incidents: tuple[Incident, ...] = ()
    """Kernel verdicts: faults read from before amdtop started (history, with their age), hive resets, error chains."""
    missing_gpus: tuple[MissingGpu, ...] = ()
    """Accelerators on the PCI bus that the backend does not show (``missing_gpus`` in ``snapshot --json``)."""


@dataclass(frozen=True, slots=True)
class KernelUpdate:
    """One poll of the kernel log."""

    flags: tuple[Flag, ...]
    """A ``gpu_fault`` flag per fault held."""
    status: KernelLogStatus
    """The reader's state."""
    new_note: str | None = None
    """The unavailability note, on the poll that found it only (so it is said once)."""


@dataclass(slots=True)
class _Fault:
    event: KernelEvent
    owner: Owner
    first: float
    last: float
    first_wall: float
    count: int = 1
    last_line: str = ""
    addresses: list[str] = field(default_factory=list)


def _key(event: KernelEvent, owner: Owner) -> tuple[object, ...]:
    where = owner.gpu if owner.gpu is not None else (event.bdf or event.kfd_node)
    return (event.cause, where, owner.partition, owner.pid, owner.worker, event.xid)


def _message(f: _Fault) -> str:
    e, o = f.event, f.owner
    named = o.bdf or e.bdf or e.kfd_node is not None
    # a line whose PCI address was cut ("Xid (PCI:...)") names no GPU: say so, never "not in this node's list"
    where = (
        f"GPU {o.gpu}"
        if o.gpu is not None
        else ("a GPU not in this node's list" if named else "a GPU the line does not name")
    )
    if o.partition is not None:
        where += f" partition {o.partition}"
    bdf = o.bdf or e.bdf
    if bdf:
        where += f" ({bdf})"
    elif e.kfd_node is not None:
        where += f" (KFD node {e.kfd_node})"
    what = WHAT[e.cause]
    if e.xid is not None:
        what += f" (Xid {e.xid})"
    if e.address:
        what += f" at {e.address}"
    if f.count > 1:
        what += f", {f.count} times"
    who = ""
    if o.pid is not None or o.process:
        who = f" by {o.process or 'pid'}" + (f" pid {o.pid}" if o.pid is not None else "")
    elif e.pasid is not None:
        who = f" by pasid {e.pasid} (no live process has it)"
    if o.worker is not None:
        who += f" ({o.worker}" + (f" rank {o.rank})" if o.rank is not None else ")")
    return f"{where}: {what}{who}: {advice(e)}"


def advice(e: KernelEvent) -> str:
    """What to do about ``e``: its Xid's own advice, a lost GPU's, else its suspect's."""
    if e.cause in LOST:
        return LOST_ADVICE
    return xid_advice(e.xid, e.detail) or ADVICE[e.suspect]


def _flag(f: _Fault) -> Flag:
    e, o = f.event, f.owner
    extra: list[tuple[str, object]] = [
        ("gpu", o.gpu),
        ("bdf", o.bdf or e.bdf),
        ("worker", o.worker),
        ("rank", o.rank),
        ("cause", e.cause.value),
        ("line", e.line),
        ("suspect", e.suspect.value),
        ("pid", o.pid),
        ("process", o.process),
        ("pasid", e.pasid),
        ("kfd_node", e.kfd_node),
        ("partition", o.partition),
        ("address", e.address),
        ("xid", e.xid),
        ("detail", e.detail),
        ("count", f.count),
        ("since", round(f.first_wall, 3)),
    ]
    return Flag(
        FlagKind.GPU_FAULT,
        _message(f),
        worker=o.worker,
        gpus=() if o.gpu is None else (o.gpu,),
        extra=tuple(extra),
    )


def _historic(f: _Fault, age_s: float) -> Incident:
    """A fault no longer live (or logged before amdtop started): history, with its age, never an alarm."""
    e, o = f.event, f.owner
    return Incident(
        kind="kernel_fault",
        summary=f"{_age(age_s)} ago: {_message(f)}",
        cause=WHAT[e.cause],
        fix=advice(e),
        evidence=(e.line,) if f.last_line == e.line else (e.line, f.last_line),
        devices=() if o.gpu is None else (o.gpu,),
        worker=o.worker,
        age_s=max(0.0, age_s),
        historic=True,
        detail=(("cause", e.cause.value), ("bdf", o.bdf or e.bdf), ("xid", e.xid), ("pid", o.pid), ("count", f.count)),
    )


def _age(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h"
    return f"{s // 86400} d"


class KernelFaultMonitor:
    """Follows one kernel source. Opened on the first :meth:`poll` (so building a pipeline does no I/O)."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        source: KernelSource | None = None,
        sysfs_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        hold_s: float = GPU_FAULT_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_note: Callable[[str], None] | None = None,
        worker_logs: bool = True,
    ) -> None:
        """Read ``path`` (from its start) when given, else ``/dev/kmsg`` or ``journalctl -k``; or a ready ``source``.
        ``on_note`` is told, once, why no kernel log can be read (the headless commands write it to stderr);
        ``worker_logs`` also follows the workers' logs for ROCr's fault reports."""
        self.path = path
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self.hold_s = hold_s
        self.clock = clock
        self.wall = wall
        self.on_note = on_note
        self._source = source
        self._opened = source is not None
        self._note: str | None = None
        self._noted = False
        self._parser = KernelLogParser()
        self._mapper: FaultMapper | None = None
        self._faults: dict[tuple[object, ...], _Fault] = {}
        self._history: dict[tuple[object, ...], _Fault] = {}
        self._verdicts = KernelVerdicts()
        self._bus: tuple[PciAccelerator, ...] | None = None
        self._missing: tuple[MissingGpu, ...] = ()
        self._boot_wall: float | None = None
        self._worker_logs = WorkerLogFaults() if worker_logs else None

    def _open(self) -> None:
        self._opened = True
        try:
            self._source = open_kernel_source(self.path)
        except SourceUnavailable as exc:
            hint = "" if self.path is not None else "; pass --kernel-log PATH to read a saved log"
            self._note = f"kernel log unavailable ({exc}): GPU faults are not watched{hint}"
            return
        self._boot_wall = self._boot_time() if getattr(self._source, "boot_clock", False) else None

    def _boot_time(self) -> float | None:
        """When this host booted (wall clock): a ``/dev/kmsg`` line's stamp plus this is when it was logged."""
        try:
            uptime = float((self.proc_root / "uptime").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return self.wall() - uptime

    def _status(self) -> KernelLogStatus:
        name = None if self._source is None else self._source.name
        return KernelLogStatus(name, self._note is None and self._source is not None, self._note, self._parser.lines)

    def _mapper_for(self, topology: Topology) -> FaultMapper:
        if self._mapper is None or self._mapper.topology is not topology:
            self._mapper = FaultMapper(topology, self.sysfs_root, self.proc_root)
        return self._mapper

    def _add(
        self,
        events: Sequence[KernelEvent],
        topology: Topology,
        workers: Sequence[WorkerStatus],
        worker: str | None = None,
    ) -> None:
        if not events:
            return
        mapper = self._mapper_for(topology)
        now, wall = self.clock(), self.wall()
        owners: dict[tuple[object, ...], Owner] = {}  # a storm of one process's faults is mapped once
        for event in events:
            ident = (event.bdf, event.kfd_node, event.pasid, event.pid, event.process)
            owner = owners.get(ident)
            if owner is None:
                owner = owners[ident] = mapper.owner(event, workers, worker=worker)
            key = _key(event, owner)
            at, at_wall = now, wall
            stamp = _TS.match(event.line) if self._boot_wall is not None and worker is None else None
            if stamp is not None and self._boot_wall is not None:
                # read from the ring buffer: it happened at boot + its stamp, maybe long before amdtop started
                at_wall = self._boot_wall + float(stamp.group(1))
                at = now - max(0.0, wall - at_wall)
            table = self._history if now - at > self.hold_s else self._faults
            held = table.get(key)
            if held is None:
                limit = _MAX_HISTORY if table is self._history else _MAX_FAULTS
                if len(table) >= limit:
                    oldest = min(table, key=lambda k: table[k].last)
                    del table[oldest]
                table[key] = _Fault(event, owner, at, at, at_wall, last_line=event.line)
            else:
                held.count += 1
                held.last = at
                held.last_line = event.line

    def poll(self, topology: Topology, workers: Sequence[WorkerStatus] = ()) -> KernelUpdate:
        """Read what the kernel logged since the last poll; the flags of every fault held."""
        if not self._opened:
            self._open()
        if self._source is not None and self._note is None:
            try:
                lines = self._source.read()
            except OSError as exc:
                self._note = f"kernel log unavailable ({self._source.name}: {exc}): GPU faults are no longer watched"
                lines = []
            events: list[KernelEvent] = []
            verdicts = self._verdicts
            for line in lines:
                events += self._parser.feed(line)
                verdicts.feed(line)
            events += self._parser.flush()
            self._add(events, topology, workers)
        if self._worker_logs is not None:
            for name, found in self._worker_logs.poll(workers):
                self._add(found, topology, workers, worker=name)
        now = self.clock()
        for key in [k for k, f in self._faults.items() if now - f.last > self.hold_s]:
            # no longer a live alarm, still what happened: kept as history with its age
            self._history[key] = self._faults.pop(key)
            while len(self._history) > _MAX_HISTORY:
                del self._history[min(self._history, key=lambda k: self._history[k].last)]
        new_note = None
        if self._note is not None and not self._noted:
            self._noted = True
            new_note = self._note
            if self.on_note is not None:
                self.on_note(new_note)
        flags = tuple(_flag(f) for f in sorted(self._faults.values(), key=lambda f: (f.first, f.event.number)))
        incidents = self._incidents(topology, workers)
        status = replace(self._status(), incidents=incidents, missing_gpus=self._missing)
        return KernelUpdate(flags, status, new_note)

    def _incidents(self, topology: Topology, workers: Sequence[WorkerStatus]) -> tuple[Incident, ...]:
        """Old faults as history (each with its age), then the verdicts over many lines (hive resets, chains...)."""
        wall = self.wall()
        history = sorted(self._history.values(), key=lambda f: f.first_wall)
        out = [_historic(f, wall - f.first_wall) for f in history]
        by_bdf = {info.bdf.lower(): info.index for info in topology.gpus}

        def place(bdf: str) -> tuple[int | None, tuple[str, ...]]:
            gpu = by_bdf.get(bdf.lower())
            names = tuple(w.name for w in workers if gpu is not None and gpu in w.gpus)
            return gpu, names

        out += (self._aged(i, wall) for i in self._verdicts.incidents(place, init_failed=False))
        if self._bus is None:
            self._bus = scan(self.sysfs_root)  # once: GPUs do not join the bus while amdtop runs
        missing = failed(self._bus, [g.bdf for g in topology.gpus]) if topology.gpus else ()
        self._missing = missing_gpus(missing, self._verdicts.init_failures)
        bus = verdict(missing, self._verdicts.init_failures)
        if bus is not None:
            out.append(bus)
        return tuple(out)

    def _aged(self, incident: Incident, wall: float) -> Incident:
        """A verdict with its age where its first line's stamp and the boot time say it (the ring buffer); one older
        than the hold is history, as a single old fault is: a hive reset of last week is not today's alarm."""
        first = dict(incident.detail).get("first_ts")
        if self._boot_wall is None or not isinstance(first, float):
            return incident
        age = max(0.0, wall - (self._boot_wall + first))
        if age <= self.hold_s:
            return replace(incident, age_s=age)
        return replace(incident, age_s=age, historic=True, summary=f"{_age(age)} ago: {incident.summary}")

    @property
    def init_failures(self) -> dict[str, tuple[str, ...]]:
        """PCI address -> the kernel's lines about its failed driver init, from what was read so far."""
        return self._verdicts.init_failures

    def close(self) -> None:
        """Close the source."""
        if self._source is not None:
            self._source.close()
            self._source = None
        if self._worker_logs is not None:
            self._worker_logs.close()
