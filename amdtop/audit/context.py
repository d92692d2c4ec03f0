"""What the rules read: the node (topology, one snapshot, sysfs, procfs) and the TP groups to judge.

Every reader that can fail says why through :class:`~amdtop.audit.model.RuleSkipped` instead of returning an empty
value, so an unreadable input shows in ``skipped`` and never passes silently.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from amdtop.audit.model import RuleSkipped
from amdtop.audit.numa_maps import NumaMapsError, node_kib
from amdtop.audit.startup_log import StartupLogs
from amdtop.errors import os_reason
from amdtop.hip_devices import physical_gpus
from amdtop.model import Flag, GpuInfo, NodeSnapshot, Topology, WorkerState, WorkerStatus
from amdtop.procinfo import PROC, read_proc_bytes, read_seq_file

if TYPE_CHECKING:
    from amdtop.supervisor.profiles import Profile


@dataclass(frozen=True, slots=True)
class AuditTarget:
    """One TP group to judge: a worker that runs (or ran), or a profile about to be launched (the gate)."""

    name: str
    gpus: tuple[int, ...]
    """Devices as the worker names them (HIP indices: partitions on a partitioned node)."""
    port: int | None = None
    pid: int | None = None
    """API server (the launched process)."""
    pids: tuple[int, ...] = ()
    """Its live processes: never counted as leftovers on its own GPUs."""
    rank_pids: tuple[tuple[int, int], ...] = ()
    log: str | None = None
    profile: Profile | None = None
    status: WorkerStatus | None = None
    numa_node: int | None = None

    @property
    def engine(self) -> str:
        """``vllm`` or ``sglang``: the profile's engine, else what discovery or the page said."""
        if self.profile is not None:
            return self.profile.engine
        return self.status.engine_kind if self.status is not None else "vllm"

    @property
    def running(self) -> bool:
        """True when it has live processes to read."""
        return bool(self.pids) or self.pid is not None

    @property
    def rank_or_all_pids(self) -> tuple[int, ...]:
        """The TP ranks' pids where known, else every pid of the worker."""
        if self.rank_pids:
            return tuple(pid for _rank, pid in sorted(self.rank_pids))
        return tuple(dict.fromkeys([*((self.pid,) if self.pid else ()), *self.pids]))


def target_of(worker: WorkerStatus, profile: Profile | None = None) -> AuditTarget:
    """The audit target of a worker as the supervisor or discovery reported it."""
    live = worker.state not in (WorkerState.STOPPED, WorkerState.CRASHED)
    return AuditTarget(
        name=worker.name,
        gpus=tuple(worker.gpus),
        port=worker.port,
        pid=worker.pid if live else None,
        pids=tuple(worker.pids) if live else (),
        rank_pids=tuple(worker.rank_pids) if live else (),
        log=worker.log,
        profile=profile,
        status=worker,
        numa_node=worker.numa_node,
    )


@dataclass
class ProcCache:
    """Reads of processes kept between audit runs for ``ttl_s`` (keyed by kind and pid; a restarted worker has new
    pids, so it is read afresh)."""

    ttl_s: float = 120.0
    clock: Callable[[], float] = time.monotonic
    _items: dict[tuple[str, int], tuple[float, object]] = field(default_factory=dict)

    def get(self, kind: str, pid: int) -> object | None:
        """The value read less than ``ttl_s`` ago, else ``None``."""
        hit = self._items.get((kind, pid))
        if hit is None or self.clock() - hit[0] >= self.ttl_s:
            return None
        return hit[1]

    def put(self, kind: str, pid: int, value: object) -> None:
        """Keep ``value``; entries older than ``ttl_s`` are dropped on the way."""
        now = self.clock()
        if len(self._items) > 4096:
            self._items = {k: v for k, v in self._items.items() if now - v[0] < self.ttl_s}
        self._items[(kind, pid)] = (now, value)


@dataclass
class AuditContext:
    """Inputs of one audit run (or one gate check)."""

    topology: Topology
    snapshot: NodeSnapshot | None = None
    targets: Sequence[AuditTarget] = ()
    sys_root: Path = Path("/sys")
    proc_root: Path = PROC
    flags: Sequence[Flag] | None = None
    """The frame's flags where an audit runs inside the pipeline (link and NUMA flags computed there); ``None``
    outside it (the NUMA rule then computes the binding check itself)."""
    launching: bool = False
    """True for the launch gate: the targets are about to start (their port must be free)."""
    startup_logs: StartupLogs = field(default_factory=StartupLogs)
    """Start-up facts per log file (the dashboard keeps one across runs, so each run reads only new lines)."""
    _environ: dict[int, dict[str, str] | str] = field(default_factory=dict)
    _numa: dict[int, dict[int, int] | str] = field(default_factory=dict)
    _worker_pids: set[int] | None = None
    carry: ProcCache | None = None
    """Per-process reads kept across runs (the dashboard's auditor keeps one): a process's environ is fixed at exec,
    and where its memory sits moves slowly, so both are re-read only every ``ProcCache.ttl_s``."""
    init_failures: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """PCI address -> the kernel's lines about its failed driver init, where the caller read them (``amdtop audit``
    on a node none of whose GPUs came up); ``""``: lines that named no device."""
    memo: dict[object, object] = field(default_factory=dict)
    """Per-run results several rules share (a worker's vLLM view, a group's physical GPUs, argv): computed once."""

    @property
    def vendor(self) -> str:
        """``AMD`` or ``NVIDIA`` (the first GPU's), ``AMD`` on a GPU-less host."""
        return self.topology.gpus[0].vendor if self.topology.gpus else "AMD"

    def physical(self, target: AuditTarget) -> tuple[int, ...]:
        """The physical GPUs under ``target``'s devices."""
        key = ("physical", target.gpus)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = physical_gpus(self.topology, target.gpus)
        return found  # type: ignore[return-value]

    def gpu(self, index: int) -> GpuInfo | None:
        """Static facts of GPU ``index``."""
        return self.topology.gpu(index)

    def all_worker_pids(self) -> set[int]:
        """Every pid of every target (processes of known workers are never leftovers)."""
        if self._worker_pids is None:
            self._worker_pids = {
                p for t in self.targets for p in (*t.pids, *(pid for _r, pid in t.rank_pids), t.pid or 0) if p
            }
        return self._worker_pids

    # -- procfs -------------------------------------------------------------------------------------------------
    def environ(self, pid: int) -> dict[str, str]:
        """Environment of ``pid``; RuleSkipped with the reason when it cannot be read (read once per run)."""
        cached = self._environ.get(pid)
        if cached is None and self.carry is not None:
            cached = self._environ[pid] = self.carry.get("environ", pid)  # type: ignore[assignment]
        if cached is None:
            try:
                raw = read_proc_bytes(pid, "environ", self.proc_root)
            except PermissionError:
                cached = (
                    f"environ of pid {pid} unreadable (permission denied: another user's process); "
                    "run amdtop as that user or as root"
                )
            except OSError as exc:
                cached = f"environ of pid {pid} unreadable ({os_reason(exc)}: the process is gone)"
            else:
                env: dict[str, str] = {}
                for item in raw.split(b"\0"):
                    key, sep, value = item.partition(b"=")
                    if sep:
                        env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
                cached = env
            self._environ[pid] = cached
            if self.carry is not None:
                self.carry.put("environ", pid, cached)
        if isinstance(cached, str):
            raise RuleSkipped(cached)
        return cached

    def numa_kib(self, pid: int) -> dict[int, int]:
        """KiB resident per NUMA node of ``pid`` (``numa_maps``); RuleSkipped with the reason when unreadable."""
        cached = self._numa.get(pid)
        if cached is None and self.carry is not None:
            cached = self._numa[pid] = self.carry.get("numa", pid)  # type: ignore[assignment]
        if cached is None:
            try:
                cached = node_kib(read_seq_file(pid, "numa_maps", self.proc_root))
            except PermissionError:
                cached = f"numa_maps of pid {pid} unreadable (permission denied: another user's process)"
            except OSError as exc:
                cached = f"numa_maps of pid {pid} unreadable ({os_reason(exc)})"
            except NumaMapsError as exc:
                cached = f"numa_maps of pid {pid} is not numa_maps ({exc})"
            self._numa[pid] = cached
            if self.carry is not None:
                self.carry.put("numa", pid, cached)
        if isinstance(cached, str):
            raise RuleSkipped(cached)
        return cached

    def cmdline(self, pid: int) -> tuple[str, ...]:
        """argv of ``pid`` (empty when gone or hidden), read once per run."""
        key = ("cmdline", pid)
        found = self.memo.get(key)
        if found is None:
            try:
                raw = read_proc_bytes(pid, "cmdline", self.proc_root)
            except OSError:
                raw = b""
            found = self.memo[key] = tuple(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
        return found  # type: ignore[return-value]

    def alive(self, pid: int) -> bool:
        """True when ``pid`` exists in procfs or is a live worker's (a pid 0 or below is a foreign namespace:
        unknown, so alive)."""
        if pid <= 0 or pid in self.all_worker_pids():
            return True
        return os.path.exists(f"{self.proc_root}/{pid}")

    def read_sys(self, *parts: str) -> str | None:
        """A sysfs attribute under ``sys_root`` (stripped), ``None`` when absent or unreadable."""
        try:
            with open(os.path.join(self.sys_root, *parts), encoding="utf-8", errors="replace") as fh:
                return fh.read().strip()
        except OSError:
            return None

    def read_proc(self, *parts: str) -> str | None:
        """A file under ``proc_root`` (stripped), ``None`` when absent or unreadable."""
        try:
            with open(os.path.join(self.proc_root, *parts), encoding="utf-8", errors="replace") as fh:
                return fh.read().strip()
        except OSError:
            return None

    def pci_dir(self, bdf: str) -> str | None:
        """The PCI device directory of ``bdf`` under ``sys_root`` (``bus/pci/devices``, else the DRM card links)."""
        direct = os.path.join(self.sys_root, "bus", "pci", "devices", bdf)
        if os.path.isdir(direct):
            # Absolute, as the DRM branch's realpath is: callers join it onto sys_root again (read_sys), and a
            # relative --sysfs-root would be joined twice (rel/sys/rel/sys/...) and read nothing.
            return os.path.abspath(direct)
        drm = os.path.join(self.sys_root, "class", "drm")
        try:
            cards = os.listdir(drm)
        except OSError:
            return None
        for card in cards:
            dev = os.path.realpath(os.path.join(drm, card, "device"))
            if os.path.basename(dev) == bdf:
                return dev
        return None
