"""The one frame: everything amdtop knows about the node after one tick, immutable and fully typed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amdtop.analysis.numa import WorkerBinding
from amdtop.audit.model import AuditReport
from amdtop.gpuprocs.rows import GpuProcessTotal, ProcessRow
from amdtop.health.throttle import ThrottleShare
from amdtop.health.traffic import FabricTraffic, GroupTraffic
from amdtop.logread.incidents.model import Incident
from amdtop.logread.kernel.monitor import KernelLogStatus
from amdtop.logread.rccl.monitor import LogUpdate
from amdtop.model import Flag, FlagKind, NodeSnapshot, WorkerStatus
from amdtop.pipeline.series import Series


@dataclass(frozen=True, slots=True)
class TpGroup:
    """One worker's TP group judged over the imbalance window: the only place a spread is computed."""

    worker: str
    """Worker whose TP group this is."""
    gpus: tuple[int, ...]
    """GPUs in rank order."""
    util_spread_pct: float | None
    """(max-min)/max of the per-GPU window means of utilization; ``None`` when idle or unknown."""
    vram_spread_pct: float | None
    """The same for VRAM in use."""
    util_mean_pct: float | None
    """Mean utilization over the group's GPUs and the window."""
    util_means: tuple[tuple[int, float], ...]
    """(GPU, window mean utilization)."""
    window_s: float
    """Window length the spreads were judged over."""
    samples: int
    """Snapshots in the window."""
    imbalanced: bool
    """True when a ``tp_imbalance`` flag was raised for this group."""
    lost_gpus: tuple[int, ...] = ()
    """GPUs of the group that stopped answering."""
    devices: tuple[int, ...] = ()
    """The devices the worker names (HIP indices: partitions on a partitioned node, else the GPUs themselves)."""
    traffic: GroupTraffic | None = None
    """Live XGMI/NVLink traffic inside the group over the last interval (``None`` where the backend gives none)."""
    dp_rank: int | None = None
    """Data-parallel rank of this group when its worker runs several replicas (``None``: the worker is one group)."""

    @property
    def label(self) -> str:
        """``worker``, or ``worker/dp1`` for a replica of a data-parallel worker."""
        return self.worker if self.dp_rank is None else f"{self.worker}/dp{self.dp_rank}"


@dataclass(frozen=True, slots=True)
class GpuHistory:
    """Recent history of one GPU, oldest first, one point per tick (``None`` where the source gave nothing). The
    pipeline's series are :class:`~amdtop.pipeline.series.Series` (windows moved on by a point a tick, not copied);
    any sequence of points reads the same. Series is named in the types so that the wire's protocol, read off them,
    carries it."""

    index: int
    """GPU index."""
    util_pct: Series | Sequence[float | None] = ()
    """Utilization, percent."""
    vram_pct: Series | Sequence[float | None] = ()
    """VRAM in use, percent of the total."""
    power_w: Series | Sequence[float | None] = ()
    """Package power, watts."""
    points: int = 0
    """Points appended to this GPU's series since the pipeline first saw the GPU (0: not counted). A history whose
    every GPU counts one point more than the frame before is that one moved on by a point: the serve tells it from
    these counts, without reading the points (serve/wire.py)."""


@dataclass(frozen=True, slots=True)
class RampKnee:
    """The knee the last load ramp found for a worker."""

    worker: str
    """Worker the ramp ran against."""
    concurrency: int
    """Concurrency at the knee."""
    recommended_max_num_seqs: int | None = None
    """``max-num-seqs`` the ramp recommended."""
    timestamp: float | None = None
    """When the ramp finished, seconds since the epoch."""


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    """Bandwidth measured between two GPUs by the link probe."""

    a: int
    """Lower GPU index."""
    b: int
    """Higher GPU index."""
    gbps: float
    """Measured GB/s (10^9 bytes per second)."""


@dataclass(frozen=True, slots=True)
class LogCounts:
    """Problems counted in one worker's RCCL/NCCL log lines (by the log monitor, which parsed them once)."""

    worker: str
    """Worker whose logs were parsed."""
    errors: int
    """Error lines."""
    warnings: int = 0
    """Warning lines."""


@dataclass(frozen=True, slots=True)
class NodeFrame:
    """One tick of the node pipeline."""

    snapshot: NodeSnapshot
    """The backend's sample."""
    workers: tuple[WorkerStatus, ...] = ()
    """amdtop's own workers, then vLLM servers discovered running."""
    flags: tuple[Flag, ...] = ()
    """Every flag of every kind, each once: backend, imbalance, NUMA, placement, logs, probe."""
    groups: tuple[TpGroup, ...] = ()
    """TP groups (workers with GPUs that are not stopped), judged over the window."""
    bindings: tuple[tuple[str, WorkerBinding], ...] = ()
    """(worker, its real binding), read once per tick."""
    history: tuple[GpuHistory, ...] = ()
    """Per-GPU history in index order."""
    logs: LogUpdate | None = None
    """What the log monitor read this tick (``None`` when no logs are followed)."""
    log_counts: tuple[LogCounts, ...] = ()
    """RCCL/NCCL error and warning counts per worker."""
    bandwidth: tuple[LinkBandwidth, ...] = ()
    """Probe results per GPU pair; empty when no probe ran."""
    ramp_knees: tuple[RampKnee, ...] = ()
    """Last ramp knee per worker."""
    fabric: FabricTraffic | None = None
    """Live XGMI/NVLink rates over the last poll interval, per GPU pair where the peer is known, else per GPU."""
    throttle: tuple[ThrottleShare, ...] = ()
    """Share of the last window each GPU spent throttled, by reason."""
    errors: tuple[str, ...] = ()
    """Parts of the tick that failed (``workers: ...``), one line each; the rest of the frame still holds."""
    tick: int = 0
    """Tick number of the pipeline that built it (1 for the first)."""
    kernel_log: KernelLogStatus | None = None
    """The kernel-log reader (source, availability); ``None`` when no kernel log is watched."""
    made_at: float | None = None
    """When the pipeline finished the tick, seconds since the epoch (``None`` for a frame built by hand)."""
    physical_workers: tuple[WorkerStatus, ...] = ()
    """``workers`` with their devices mapped to the physical GPUs under them (the same on an unpartitioned node)."""
    gpu_owners: tuple[tuple[int, str, int], ...] = ()
    """(physical GPU, worker, TP rank) for the GPUs of workers that are not stopped."""
    hip_owners: tuple[tuple[int, str, int], ...] = ()
    """(HIP device, worker, TP rank): the same per device as the workers name them (partitions on a partitioned
    node)."""
    processes: tuple[ProcessRow, ...] = ()
    """Every process on the GPUs with its host facts and owner, GPU by GPU, biggest memory first."""
    process_totals: tuple[GpuProcessTotal, ...] = ()
    """Per GPU: memory the processes hold against the memory in use."""
    audit: AuditReport | None = None
    """The newest tuning audit (run on the slow cadence; the same report rides in frames until the next run)."""

    @property
    def incidents(self) -> tuple[Incident, ...]:
        """Every incident in the frame: the workers' logs' (each worker's own), then the kernel log's."""
        logs = () if self.logs is None else tuple(i for w in self.logs.workers for i in w.incidents)
        kernel = () if self.kernel_log is None else self.kernel_log.incidents
        return (*logs, *kernel)

    def flags_of(self, *kinds: FlagKind) -> tuple[Flag, ...]:
        """Flags of the given kinds, in frame order."""
        return tuple(f for f in self.flags if f.kind in kinds)

    def flags_for_worker(self, worker: str) -> tuple[Flag, ...]:
        """Flags that name ``worker``."""
        return tuple(f for f in self.flags if f.worker == worker)

    def flags_for_gpu(self, gpu: int) -> tuple[Flag, ...]:
        """Flags that name GPU ``gpu``."""
        return tuple(f for f in self.flags if gpu in f.gpus)

    def group(self, worker: str) -> TpGroup | None:
        """The TP group of ``worker``."""
        return next((g for g in self.groups if g.worker == worker), None)

    def groups_of(self, worker: str) -> tuple[TpGroup, ...]:
        """Every TP group of ``worker`` (one per data-parallel replica)."""
        return tuple(g for g in self.groups if g.worker == worker)

    def binding_of(self, worker: str) -> WorkerBinding | None:
        """The binding read for ``worker`` this tick."""
        return next((b for name, b in self.bindings if name == worker), None)

    def history_of(self, gpu: int) -> GpuHistory:
        """History of GPU ``gpu`` (empty when unknown)."""
        return next((h for h in self.history if h.index == gpu), GpuHistory(gpu))

    def throttle_of(self, gpu: int) -> ThrottleShare | None:
        """The throttle shares of GPU ``gpu``."""
        return next((t for t in self.throttle if t.gpu == gpu), None)

    def worker(self, name: str) -> WorkerStatus | None:
        """The worker called ``name``."""
        return next((w for w in self.workers if w.name == name), None)

    def owners_by_gpu(self) -> dict[int, tuple[str, int]]:
        """Physical GPU -> (worker, TP rank)."""
        return {gpu: (name, rank) for gpu, name, rank in self.gpu_owners}

    def owners_by_hip(self) -> dict[int, tuple[str, int]]:
        """HIP device -> (worker, TP rank)."""
        return {dev: (name, rank) for dev, name, rank in self.hip_owners}
