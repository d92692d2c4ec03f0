"""Kernel lines met in any log file (a dmesg saved to a file, ``journalctl -k``, a console capture, a worker's log
with kernel lines pasted in): the same parser and verdicts as ``--kernel-log`` and ``/dev/kmsg``, judged without a
node (no GPU index, no worker: the PCI address names the GPU).

``amdtop logs parse`` feeds every line that is not an NCCL INFO line here (:class:`amdtop.logread.rccl.parser.LogParser`), so
a journal, a dmesg and an RCCL log are read by one command. Repeats are merged with a count and the incidents are
capped: a log of 100k identical faults is one incident, not 100k.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from amdtop.logread import Catalog, Matcher, load_catalog, read_head
from amdtop.logread.incidents.model import MAX_EVIDENCE, Incident
from amdtop.logread.kernel.events import LOST, FaultCause, KernelEvent
from amdtop.logread.kernel.incidents import KernelVerdicts
from amdtop.logread.kernel.monitor import WHAT, advice
from amdtop.logread.kernel.parser import KernelLogParser

KERNEL_FAMILIES = ("amdgpu", "nvidia")
"""Catalog families of kernel lines. Their incidents are built here (per-GPU state over many lines: a reset's outcome,
a hive's episode, an Xid chain), so the job-log reader runs every other family (:func:`job_catalog`)."""


@lru_cache(maxsize=1)
def kernel_matcher() -> Matcher:
    """The kernel families of the catalog: a single fault's meaning and fix come from its entry."""
    return Matcher(load_catalog().only(KERNEL_FAMILIES))


def job_catalog() -> Catalog:
    """Every family but the kernel's (which :class:`KernelLineReader` reads, with state the line matcher lacks)."""
    return load_catalog().without(KERNEL_FAMILIES)


MAX_GROUPS = 64
"""Distinct faults kept (by cause, device, process and Xid); later distinct ones are counted, not kept."""

_TOLD_BY_VERDICTS = frozenset({45, 79, 94, 95, 119, 120})
"""Xids a many-line verdict tells (a chain, a lost GPU, ECC, a GSP timeout): not told again one by one."""


@dataclass(slots=True)
class _Group:
    event: KernelEvent
    count: int = 1
    last: str = ""
    bdfs: list[str] = field(default_factory=list)
    """Every GPU it was seen on (one process's fault on several GPUs at once is one incident)."""

    def add(self, e: KernelEvent) -> None:
        self.count += 1
        self.last = e.line
        if e.bdf and e.bdf not in self.bdfs and len(self.bdfs) < MAX_GROUPS:
            self.bdfs.append(e.bdf)


def _key(e: KernelEvent) -> tuple[object, ...]:
    if e.pid is not None:
        return (e.cause, "pid", e.pid, e.xid)  # one process's fault, on however many GPUs
    return (e.cause, e.bdf or e.kfd_node, e.xid)


def _group(e: KernelEvent) -> _Group:
    return _Group(e, last=e.line, bdfs=[e.bdf] if e.bdf else [])


def _nowhere(_bdf: str) -> tuple[int | None, tuple[str, ...]]:
    return None, ()


class KernelLineReader:
    """Feed lines in order; :meth:`incidents` judges what was read so far (it can be asked again as more comes)."""

    def __init__(self) -> None:
        self._parser = KernelLogParser()
        self._verdicts = KernelVerdicts()
        self._groups: dict[tuple[object, ...], _Group] = {}
        self._dropped = 0

    def feed(self, line: str) -> None:
        """Read one line: substring tests (C speed; one regex alternation costs more) decide whether it can be a line
        of these families at all (amdgpu's and DRM's prefixes, NVRM, NVSwitch SXids, PCIe AER; during a reset or a PCIe
        error, the lines that name no device), then each reader's own tests."""
        if not (
            "amdgpu" in line
            or "drm" in line
            or "NVRM" in line
            or "SXid" in line
            or "AER" in line
            or "PCIe Bus Error" in line
            or "[Hardware Error]" in line  # APEI GHES records (ghes.c, cper.c): corrected PCIe errors among them
            or "aer_" in line  # cper_print_aer's lines on kernels whose aer.c printed no "AER: " prefix
            or (
                self._verdicts.expects_unnamed
                and ("essage" in line or "mu" in line or "MU" in line or "(First)" in line)
            )
        ):
            return
        for event in self._parser.feed(line):
            self._add(event)
        self._verdicts.feed(line)

    def _add(self, event: KernelEvent) -> None:
        key = _key(event)
        group = self._groups.get(key)
        if group is not None:
            group.add(event)
        elif len(self._groups) < MAX_GROUPS:
            self._groups[key] = _group(event)
        else:
            self._dropped += 1

    def incidents(self) -> tuple[Incident, ...]:
        """The verdicts over many lines (lost GPUs, resets, failed inits, chains...), then each other fault once."""
        out = list(self._verdicts.incidents(_nowhere, init_failed=True))
        groups = {k: _Group(g.event, g.count, g.last, list(g.bdfs)) for k, g in self._groups.items()}
        for event in self._parser.pending():  # faults still taking lines when the log ended
            group = groups.get(_key(event))
            if group is None:
                groups[_key(event)] = _group(event)
            else:
                group.add(event)
        for group in sorted(groups.values(), key=lambda g: g.event.number):
            incident = _single(group)
            if incident is not None:
                out.append(incident)
        if self._dropped and out:
            last = out[-1]
            out[-1] = replace(last, detail=(*last.detail, ("left_out", self._dropped)))
        return tuple(out)


def _single(group: _Group) -> Incident | None:
    """One fault (its repeats counted) as an incident; ``None`` where a verdict over many lines tells it already."""
    e = group.event
    if e.cause in LOST or e.cause is FaultCause.RESET or (e.xid in _TOLD_BY_VERDICTS):
        return None
    if e.kfd_node is not None and e.bdf is None:
        return None  # a ROCr report in an application's output: the job-log families read it
    if e.detail and e.detail.startswith(("NVSwitch", "GSP timeout")):
        return None  # the SXid and GSP verdicts tell them
    where = ", ".join(group.bdfs) or "a GPU the line does not name"
    what = WHAT[e.cause] + (f" (Xid {e.xid})" if e.xid is not None else "")
    if e.address:
        what += f" at {e.address}"
    if group.count > 1:
        what += f", {group.count} times"
    who = ""
    if e.pid is not None or e.process:
        who = f" by {e.process or 'pid'}" + (f" pid {e.pid}" if e.pid is not None else "")
    elif e.pasid is not None:
        who = f" by pasid {e.pasid}"
    detail = f" ({e.detail})" if e.detail and e.xid is None else ""
    evidence = (e.line,) if group.count == 1 or not group.last or group.last == e.line else (e.line, group.last)
    entry = kernel_matcher().match(read_head(e.line).text)
    cause = e.detail or WHAT[e.cause]
    fix = advice(e)
    if entry is not None and e.xid not in (45,):  # an Xid 45's advice depends on what came before it
        cause = f"{cause}: {entry.entry.meaning}" if e.detail else entry.entry.meaning
        fix = entry.entry.fix
    return Incident(
        kind="xid" if e.xid is not None else "kernel_fault",
        summary=f"{where}: {what}{detail}{who}",
        cause=cause,
        fix=fix,
        evidence=evidence[:MAX_EVIDENCE],
        detail=(
            ("entry", None if entry is None else entry.entry.id),
            ("cause", e.cause.value),
            ("bdf", e.bdf),
            ("bdfs", tuple(group.bdfs)),
            ("xid", e.xid),
            ("pid", e.pid),
            ("process", e.process),
            ("suspect", e.suspect.value),
            ("count", group.count),
        ),
    )
