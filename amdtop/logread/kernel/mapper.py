"""Who a kernel fault belongs to: the PCI address or KFD node to the GPU (and partition), the pasid to the process
(``/sys/class/kfd/kfd/proc/<pid>/pasid``), and the process or the GPU to the worker and its TP rank."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from amdtop import sysread
from amdtop.hip_devices import resolve_hip_index
from amdtop.logread.kernel.events import KernelEvent
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.telemetry.kfd import read_kfd_nodes

_ANCESTORS = 8
"""How far up the parent chain a faulting process is followed to find the worker that started it."""


@dataclass(frozen=True, slots=True)
class Owner:
    """Where a fault lands."""

    gpu: int | None = None
    """Physical GPU index."""
    partition: int | None = None
    """Compute partition of the GPU, where the fault names one (a KFD node of a partitioned GPU)."""
    bdf: str | None = None
    """PCI address of the GPU (the fault's own, or the GPU's where the fault named a KFD node)."""
    pid: int | None = None
    """The faulting process (from the line, or from the pasid)."""
    process: str | None = None
    """Its name."""
    worker: str | None = None
    """Worker the process (or, without a process, the GPU) belongs to."""
    rank: int | None = None
    """TP rank within the worker."""


def _bus_device(bdf: str) -> str:
    return bdf.rpartition(".")[0]


class FaultMapper:
    """Maps faults against one topology; the KFD node table is read once, the pasid table when a fault needs it."""

    def __init__(self, topology: Topology, sysfs_root: Path = Path("/sys"), proc_root: Path = Path("/proc")) -> None:
        """Index the GPUs by PCI address and KFD node."""
        self.topology = topology
        self.sysfs_root = sysfs_root
        self.proc_root = proc_root
        self._by_bdf = {g.bdf.lower(): g.index for g in topology.gpus}
        # Partitions of one GPU share its bus and device and differ in the PCI function (amd.md §3).
        self._by_bus = {_bus_device(g.bdf.lower()): g.index for g in topology.gpus}
        self._by_node: dict[int, tuple[int, int | None]] = {}
        for g in topology.gpus:
            for p in g.partitions:
                if p.kfd_node is not None:
                    self._by_node[p.kfd_node] = (g.index, p.index)
        self._kfd_read = False

    def _kfd_node(self, node: int) -> tuple[int, int | None] | None:
        if node not in self._by_node and not self._kfd_read:
            self._kfd_read = True
            for n in read_kfd_nodes(self.sysfs_root):
                if n.bdf is not None:
                    gpu = self._gpu_of_bdf(n.bdf)
                    if gpu is not None:
                        self._by_node.setdefault(n.node, (gpu, None))
        return self._by_node.get(node)

    def _gpu_of_bdf(self, bdf: str) -> int | None:
        bdf = bdf.lower()
        found = self._by_bdf.get(bdf)
        return found if found is not None else self._by_bus.get(_bus_device(bdf))

    def pid_of_pasid(self, pasid: int) -> int | None:
        """The process whose KFD context has ``pasid`` (``None`` when no live process has it)."""
        base = self.sysfs_root / "class" / "kfd" / "kfd" / "proc"
        try:
            names = os.listdir(base)
        except OSError:
            return None
        for name in names:
            try:
                if int(sysread.read_text(base / name / "pasid").strip()) == pasid:
                    return int(name)
            except (OSError, ValueError):
                continue
        return None

    def _comm(self, pid: int) -> str | None:
        try:
            return sysread.read_text(self.proc_root / str(pid) / "comm").strip() or None
        except OSError:
            return None

    def _parent(self, pid: int) -> int | None:
        try:
            text = sysread.read_text(self.proc_root / str(pid) / "stat")
        except OSError:
            return None
        fields = text.rpartition(")")[2].split()
        try:
            return int(fields[1])  # after the state
        except (IndexError, ValueError):
            return None

    def _worker_of_pid(self, pid: int, workers: Sequence[WorkerStatus]) -> tuple[str, int | None] | None:
        if not workers:
            return None
        seen = pid
        for _ in range(_ANCESTORS):
            for w in workers:
                for rank, rpid in w.rank_pids:
                    if rpid == seen:
                        return w.name, rank
            for w in workers:
                if seen in w.pids or seen == w.pid:
                    return w.name, None
            parent = self._parent(seen)
            if parent is None or parent <= 1:
                return None
            seen = parent
        return None

    def _ranks_on(self, gpu: int, partition: int | None, w: WorkerStatus) -> list[int]:
        ranks = []
        for rank, hip in enumerate(w.gpus):
            where = resolve_hip_index(self.topology, hip)
            if where is None:
                continue
            g, part = where
            if g == gpu and (partition is None or part is None or part == partition):
                ranks.append(rank)
        return ranks

    def owner(self, event: KernelEvent, workers: Sequence[WorkerStatus], *, worker: str | None = None) -> Owner:
        """The GPU, process, worker and rank of ``event`` (each ``None`` where it cannot be told); ``worker`` when the
        line came from that worker's own log."""
        hint = worker
        gpu = partition = None
        bdf = event.bdf
        if event.bdf is not None:
            gpu = self._gpu_of_bdf(event.bdf)
            if gpu is not None:
                info = self.topology.gpu(gpu)
                if info is not None and info.partitions and event.bdf.lower() != info.bdf.lower():
                    partition = int(event.bdf[-1])
        elif event.kfd_node is not None:
            found = self._kfd_node(event.kfd_node)
            if found is not None:
                gpu, partition = found
                info = self.topology.gpu(gpu)
                bdf = info.bdf if info is not None else None
        pid, process = event.pid, event.process
        if pid is None and event.pasid is not None:
            pid = self.pid_of_pasid(event.pasid)
            if pid is not None and process is None:
                process = self._comm(pid)
        worker = rank = None
        live = [w for w in workers if w.state is not WorkerState.STOPPED]
        if hint is not None:
            worker = hint
            live = [w for w in workers if w.name == hint]  # its log: crashed or not, the fault is its
        elif pid is not None:
            found_w = self._worker_of_pid(pid, live)
            if found_w is not None:
                worker, rank = found_w
        elif gpu is not None:
            # No process named: the fault is the GPU's, and so of the worker whose TP group holds it.
            holders = [w for w in live if self._ranks_on(gpu, partition, w)]
            if len(holders) == 1:
                worker = holders[0].name
        if worker is not None and rank is None and gpu is not None:
            w = next((w for w in live if w.name == worker), None)
            ranks = [] if w is None else self._ranks_on(gpu, partition, w)
            rank = ranks[0] if len(ranks) == 1 else None
        return Owner(gpu, partition, bdf, pid, process, worker, rank)
