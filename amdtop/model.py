"""Domain values shared by every part of amdtop.

All values are frozen: one poll yields one immutable :class:`NodeSnapshot`, built in one pass, that the TUI, the
headless commands and the exporter read without locks. A metric a source cannot give is ``None``, never a made-up
number and never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from amdtop.layout import TpGroupLayout, WorkerLayout


class LinkType(str, Enum):
    """Class of the interconnect between two GPUs, as in the CLI contract."""

    XGMI = "XGMI"
    NVLINK = "NVLINK"
    PCIE = "PCIE"
    UNKNOWN = "UNKNOWN"


class FlagKind(str, Enum):
    """Kinds of problems amdtop raises (``flags[].kind`` in JSON)."""

    TP_IMBALANCE = "tp_imbalance"
    NUMA_MISMATCH = "numa_mismatch"
    GPU_LOST = "gpu_lost"
    LINK_DEGRADED = "link_degraded"
    TRANSPORT_FALLBACK = "transport_fallback"
    NUMA_BALANCING = "numa_balancing"
    TP_PLACEMENT = "tp_placement"
    NCCL_ERROR = "nccl_error"
    NCCL_TIMEOUT = "nccl_timeout"
    GPU_THROTTLED = "gpu_throttled"
    ECC_UNCORRECTABLE = "ecc_uncorrectable"
    PARTITION_SPLIT = "partition_split"
    GPU_FAULT = "gpu_fault"
    NCCL_INIT_INCOMPLETE = "nccl_init_incomplete"
    NCCL_INIT_STALLED = "nccl_init_stalled"
    NIC_MISMATCH = "nic_mismatch"
    WORKER_STALLED = "worker_stalled"


@dataclass(frozen=True, slots=True)
class Partition:
    """One compute partition (XCP) of a GPU: its own KFD node, render node and HIP device (MI300-class)."""

    index: int
    """Partition index within its GPU (the PCI function bits of the KFD node's ``location_id``)."""
    kfd_node: int | None = None
    """KFD topology node index."""
    gpu_id: int | None = None
    """KFD ``gpu_id`` of the partition (the key of ``vram_<gpu_id>`` per-process files)."""
    render_minor: int | None = None
    """DRM render minor: ``/dev/dri/renderD<minor>``."""
    hip_index: int | None = None
    """Device index HIP and vLLM use for this partition (no ``*_VISIBLE_DEVICES`` applied)."""
    numa_node: int | None = None
    """Host NUMA node KFD links this partition to (its lightest CPU io_link)."""
    mem_bytes: int | None = None
    """Local memory of the partition per KFD ``mem_banks`` (VRAM / compute partitions: 24 GB in CPX)."""
    compute_units: int | None = None
    """CUs of the partition (``simd_count / simd_per_cu``)."""


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """Static facts about one GPU, read once."""

    index: int
    """amdtop's index: the SMI/driver enumeration order."""
    name: str
    """Marketing name, e.g. ``AMD Instinct MI300X``."""
    bdf: str
    """PCI address, lowercase ``dddd:bb:dd.f``."""
    numa_node: int | None
    """Host NUMA node the GPU is attached to; ``None`` when the platform says -1 or cannot tell."""
    vendor: str = "AMD"
    """``AMD`` or ``NVIDIA``."""
    uuid: str | None = None
    """Unique id where the source gives one."""
    vram_total_bytes: int | None = None
    """Total VRAM in bytes."""
    cpu_affinity: tuple[int, ...] = ()
    """Host CPUs local to the GPU (its NUMA node's CPUs, or the driver's local_cpulist)."""
    power_cap_w: float | None = None
    """Power cap in watts."""
    compute_partition: str | None = None
    """Compute partition mode ``SPX|DPX|QPX|CPX``; ``None`` where the GPU has no partition modes."""
    memory_partition: str | None = None
    """Memory partition mode ``NPS1|NPS2|NPS4|NPS8``; ``None`` where the GPU has no partition modes."""
    partitions: tuple[Partition, ...] = ()
    """The GPU's compute partitions in index order; empty when it is not partitioned."""
    available_compute_partitions: tuple[str, ...] = ()
    """Compute modes the GPU can be switched to (``available_compute_partition``)."""
    available_memory_partitions: tuple[str, ...] = ()
    """Memory modes the GPU can be switched to (``available_memory_partition``)."""


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a GPU."""

    pid: int
    """Host PID (may be 0 or foreign when the process lives in another PID namespace)."""
    name: str | None
    """Process name, ``None`` when the source hides it."""
    vram_bytes: int | None
    """VRAM held by the process on this GPU."""
    partition: int | None = None
    """Compute partition the memory is on (``Partition.index``), ``None`` when the GPU is not partitioned."""
    gpu_util_pct: float | None = None
    """The process's share of the GPU's engines over the last interval, 0-100 (NVML process utilisation samples,
    amdgpu fdinfo engine time); ``None`` where the backend gives none per process."""


@dataclass(frozen=True, slots=True)
class XgmiLinkCounters:
    """One GPU-to-GPU fabric link of one GPU, as cumulative counters (rates come from deltas between polls)."""

    link: int
    """Link index on this GPU (amdsmi ``links[i]``, gpu_metrics ``xgmi_*_data_acc[i]``, NVLink id)."""
    peer_bdf: str | None = None
    """PCI address of the GPU at the other end; ``None`` where the source does not say (gpu_metrics alone)."""
    read_kb: int | None = None
    """Data read over the link since the driver loaded, KB (amdsmi/gpu_metrics unit; NVML KiB)."""
    write_kb: int | None = None
    """Data written over the link since the driver loaded, KB."""
    max_bandwidth_gbps: float | None = None
    """Peak bandwidth of the link where the source says, GB/s."""


@dataclass(frozen=True, slots=True)
class EccCount:
    """Memory/RAS error counts of one hardware block (``umc``, ``gfx``, ``dram``...) since the driver loaded."""

    block: str
    """Block name, lowercase (sysfs ``ras/<block>_err_count``, amdsmi ``AmdSmiGpuBlock``, NVML memory location)."""
    correctable: int | None = None
    """Corrected errors."""
    uncorrectable: int | None = None
    """Uncorrectable errors."""
    deferred: int | None = None
    """Deferred errors (AMD only)."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one poll."""

    index: int
    """GPU index (matches :attr:`GpuInfo.index`)."""
    util_pct: float | None = None
    """Graphics/compute engine activity, 0-100."""
    vram_used_bytes: int | None = None
    """VRAM in use, bytes."""
    vram_total_bytes: int | None = None
    """Total VRAM, bytes."""
    power_w: float | None = None
    """Current package/socket power, watts."""
    temp_c: float | None = None
    """Hottest meaningful sensor: junction (hotspot) on AMD, GPU core on NVIDIA, degrees Celsius."""
    mem_temp_c: float | None = None
    """Memory (HBM) temperature, degrees Celsius."""
    sclk_mhz: float | None = None
    """Current graphics/SM clock, MHz."""
    mclk_mhz: float | None = None
    """Current memory clock, MHz."""
    mem_util_pct: float | None = None
    """Memory controller activity, 0-100."""
    processes: tuple[GpuProcess, ...] = ()
    """Processes with memory on this GPU."""
    lost: bool = False
    """True when the GPU stopped answering; all metrics are then ``None``."""
    error: str | None = None
    """Why the GPU is lost, one line."""
    xgmi_links: tuple[XgmiLinkCounters, ...] | None = None
    """Per-link fabric traffic counters (XGMI or NVLink); ``None`` where the source has none."""
    throttle_active: tuple[str, ...] | None = None
    """Throttle reasons active at this poll (``power_cap``, ``thermal``, ``prochot``, ``hbm_thermal``...);
    ``()`` when none is, ``None`` when the source cannot tell."""
    throttle_acc: tuple[tuple[str, float], ...] | None = None
    """Cumulative time spent throttled per reason, in the unit of :attr:`throttle_clock`; the share of a window
    spent throttled is the counter's delta over the clock's delta."""
    throttle_clock: float | None = None
    """The counter :attr:`throttle_acc` is measured against (gpu_metrics ``accumulation_counter``, seconds)."""
    ecc: tuple[EccCount, ...] | None = None
    """RAS/ECC error counts per block; ``None`` where the source has none."""

    @property
    def vram_pct(self) -> float | None:
        """VRAM in use as a percentage of the total, when both are known."""
        if self.vram_used_bytes is None or not self.vram_total_bytes:
            return None
        return 100.0 * self.vram_used_bytes / self.vram_total_bytes


@dataclass(frozen=True, slots=True)
class Link:
    """The connection between two GPUs (each unordered pair once, ``a < b``)."""

    a: int
    """Lower GPU index."""
    b: int
    """Higher GPU index."""
    type: LinkType
    """Link class."""
    hops: int | None = None
    """Abstract hop count (AMD: 1 XGMI, 2 PCIe same node, 3 across nodes); ``None`` when unknown."""
    weight: int | None = None
    """KFD/SMI link weight (15 per XGMI hop, 20 per PCIe segment); ``None`` when unknown."""
    nvlinks: int | None = None
    """Number of NVLink links between the pair (NVIDIA only)."""
    max_bandwidth_mbs: int | None = None
    """Driver-reported peak bandwidth in MB/s, where known."""

    @property
    def direct(self) -> bool:
        """True for a direct GPU-to-GPU fabric link (XGMI or NVLink, one hop)."""
        return self.type in (LinkType.XGMI, LinkType.NVLINK) and (self.hops is None or self.hops <= 1)


@dataclass(frozen=True, slots=True)
class NumaNode:
    """A host NUMA node."""

    id: int
    """Node id as in /sys/devices/system/node."""
    cpus: tuple[int, ...]
    """CPUs of the node."""
    mem_total_bytes: int | None = None
    """Memory of the node, bytes."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Static GPU and host topology."""

    gpus: tuple[GpuInfo, ...]
    """GPUs in index order."""
    links: tuple[Link, ...]
    """Every unordered GPU pair once."""
    numa_nodes: tuple[NumaNode, ...]
    """Host NUMA nodes."""

    def link(self, a: int, b: int) -> Link | None:
        """Return the link between GPUs ``a`` and ``b`` in either order."""
        lo, hi = (a, b) if a < b else (b, a)
        for link in self.links:
            if link.a == lo and link.b == hi:
                return link
        return None

    def gpu(self, index: int) -> GpuInfo | None:
        """Return the GPU with ``index``."""
        for info in self.gpus:
            if info.index == index:
                return info
        return None


@dataclass(frozen=True, slots=True)
class Flag:
    """A problem amdtop raises; serialised into ``flags`` of ``snapshot --json``."""

    kind: FlagKind
    """What kind of problem."""
    message: str
    """One line for humans."""
    worker: str | None = None
    """Worker (TP group) concerned, if any."""
    gpus: tuple[int, ...] = ()
    """GPUs concerned."""
    metric: str | None = None
    """Metric the flag is about (``util_pct``, ``vram_used_bytes``...)."""
    spread_pct: float | None = None
    """For imbalance: (max-min)/max in percent."""
    extra: tuple[tuple[str, object], ...] = ()
    """More key/value facts for JSON (kept as pairs so the value stays hashable and frozen)."""


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One timestamped sample of the whole node."""

    backend: str
    """Backend that produced it (``sysfs``, ``amdsmi``, ``nvml``, ``sim``)."""
    hostname: str
    """Host name."""
    timestamp: float
    """Wall-clock time of the poll, seconds since the epoch."""
    topology: Topology
    """Static topology (same object poll after poll)."""
    gpus: tuple[GpuSample, ...]
    """Per-GPU samples in index order."""
    flags: tuple[Flag, ...] = field(default=())
    """Problems the backend itself detected (lost GPUs); analysis adds more."""
    processes_at: float | None = None
    """Wall-clock time the GPUs' process lists were read, where the backend reads them on a slower cadence than the
    poll (``None``: read with this poll)."""

    def sample(self, index: int) -> GpuSample | None:
        """Return the sample of GPU ``index``."""
        if 0 <= index < len(self.gpus) and self.gpus[index].index == index:
            return self.gpus[index]  # samples are in index order: the usual case needs no scan
        for s in self.gpus:
            if s.index == index:
                return s
        return None


class WorkerState(str, Enum):
    """Life cycle of a worker (``state`` in ``workers status --json``)."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    CRASHED = "crashed"
    ASLEEP = "asleep"
    """vLLM sleep mode: up, but its weights/KV cache are offloaded or discarded (VRAM freed on purpose)."""


@dataclass(frozen=True, slots=True)
class EngineSample:
    """One engine (one DP replica, ``engine`` label of the vLLM series) of a worker."""

    engine: str
    """The ``engine`` label (``"0"`` without data parallelism; the DP rank)."""
    running: float | None = None
    """Requests in this engine's batch."""
    waiting: float | None = None
    """Requests queued at this engine."""
    kv_cache_usage: float | None = None
    """This engine's KV-cache usage 0..1 (gauges are never summed across engines)."""
    gen_tokens_per_s: float | None = None
    """This engine's generation tokens/s from counter deltas."""
    sleep_level: int | None = None
    """0 awake, 1 weights offloaded, 2 all discarded (``vllm:engine_sleep_state``); ``None`` where not exposed."""
    gen_tokens_total: float | None = None
    """This engine's ``vllm:generation_tokens_total`` as scraped (the stall judge compares it per DP replica)."""
    requests_finished: float | None = None
    """This engine's ``vllm:request_success_total`` summed over ``finished_reason``."""
    requests_started: float | None = None
    """This engine's requests that got a first token (``vllm:time_to_first_token_seconds_count``)."""


@dataclass(frozen=True, slots=True)
class EngineStats:
    """The vLLM engine's own numbers, scraped from ``/metrics``; ``None`` where the server does not say."""

    running: float | None = None
    """Requests in the batch (``vllm:num_requests_running``)."""
    waiting: float | None = None
    """Requests queued (``vllm:num_requests_waiting``)."""
    kv_cache_usage: float | None = None
    """KV-cache usage 0..1 (``vllm:kv_cache_usage_perc``, old ``vllm:gpu_cache_usage_perc``)."""
    gen_tokens_per_s: float | None = None
    """Generation tokens/s from ``vllm:generation_tokens_total`` deltas."""
    engines: tuple[EngineSample, ...] = ()
    """Per engine (DP replica), in engine-label order. The worker totals above sum the counters and the request
    gauges over engines; ``kv_cache_usage`` is the highest engine's (a fraction is never summed)."""
    sleep_level: int | None = None
    """Deepest sleep level over the engines (0 awake); ``None`` where the server does not say."""
    gen_tokens_total: float | None = None
    """``vllm:generation_tokens_total`` as scraped (the stall judge compares it between scrapes)."""
    requests_finished: float | None = None
    """``vllm:request_success_total`` summed over ``finished_reason``."""
    requests_started: float | None = None
    """Requests that got their first token (``vllm:time_to_first_token_seconds_count``): with ``requests_finished``
    it tells the requests in flight where the CPU build's gauges read 0 under load."""
    requests_accepted: float | None = None
    """Requests the API server holds open (``GET /load``'s ``server_load``, counted where vLLM runs with
    ``--enable-server-load-tracking``): unlike the engine's counters it includes requests that never got a first token,
    which is all of them once EngineCore hangs between two batches."""
    cache_hit_rate: float | None = None
    """Prefix-cache hit rate 0..1: SGLang's ``sglang:cache_hit_rate`` gauge, or vLLM's prefix-cache hits over queries
    since the server started."""
    ttft_mean_s: float | None = None
    """Mean time to first token over the requests since the previous scrape (since start on the first one)."""
    itl_mean_s: float | None = None
    """Mean inter-token latency, likewise."""
    kind: str = "vllm"
    """The server that wrote the page: ``vllm`` or ``sglang``."""


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A worker (one vLLM server, one TP group) as seen now: amdtop's own or discovered from running processes."""

    name: str
    """Profile name, or ``vllm-<pid>`` for a discovered server."""
    state: WorkerState
    """Life-cycle state."""
    gpus: tuple[int, ...]
    """GPU indices of its TP group, rank order."""
    port: int | None = None
    """HTTP port."""
    numa_node: int | None = None
    """NUMA node it is pinned to (``None``: not pinned)."""
    pid: int | None = None
    """PID of the API server (the launched process)."""
    pgid: int | None = None
    """Process group."""
    url: str | None = None
    """Base URL, ``http://127.0.0.1:<port>``."""
    pids: tuple[int, ...] = ()
    """Every live process of the worker (API server, EngineCore, TP workers...)."""
    rank_pids: tuple[tuple[int, int], ...] = ()
    """(TP rank, pid) of the GPU worker processes where known."""
    cpu_affinity: tuple[int, ...] = ()
    """Union of the CPUs its processes may run on."""
    mems_allowed: tuple[int, ...] = ()
    """Union of the NUMA nodes its processes may allocate on."""
    log: str | None = None
    """Path of its log file."""
    restarts: int = 0
    """Restarts since the profile was first launched."""
    started_at: float | None = None
    """Wall-clock start time of the current run."""
    source: str = "amdtop"
    """``amdtop`` (launched by amdtop) or ``discovered`` (found among running processes)."""
    engine: EngineStats | None = None
    """Scraped engine numbers."""
    last_log_lines: tuple[str, ...] = ()
    """Last lines of the log, filled when the worker crashed."""
    simulated: bool = False
    """A demo worker standing in for one of the simulated node: its binding fields are the simulated node's, so
    NUMA checks must use them rather than this host's procfs."""
    note: str | None = None
    """Why amdtop's view of this worker is not its plain launch record (e.g. the state was rebuilt from the running
    processes because the state file was torn); ``None`` normally."""
    ranks: tuple[RankSample, ...] = ()
    """Each TP rank's process as read from ``/proc`` with this status (a rank seen earlier and now gone is
    ``state == "gone"``)."""
    health: WorkerHealth | None = None
    """Instant verdict over :attr:`ranks` (and the crash log); ``None`` where nothing was judged."""
    error_line: str | None = None
    """For a crashed worker: what its log says went wrong (the rank that died, else the last error line)."""
    layout: WorkerLayout | None = None
    """DP/TP/PP sizes and expert parallel (from the profile or the discovered command line); ``None``: plain TP."""
    engine_kind: str = "vllm"
    """The serving engine: ``vllm`` or ``sglang`` (from the profile, the discovered command line or the page)."""
    log_note: str | None = None
    """A server amdtop did not start: why :attr:`log` is ``None`` (its stdout is a pipe or a terminal...), or where
    its output goes instead (a journal, a container runtime's log); ``None`` for amdtop's own workers."""
    other_logs: tuple[str, ...] = ()
    """Further files the worker writes its output to (a found server's stderr, when it is a file apart from its
    stdout's): followed by the log monitor beside :attr:`log`."""

    def tp_groups(self) -> tuple[TpGroupLayout, ...]:
        """The worker's TP groups (one per DP replica and pipeline stage); one group of every GPU without a layout."""
        return (self.layout or WorkerLayout(tp=max(1, len(self.gpus)))).groups(self.name, self.gpus)


@dataclass(frozen=True, slots=True)
class RankSample:
    """One TP rank's process at one look (``/proc/PID/stat``)."""

    rank: int
    """TP rank."""
    pid: int
    """Its process."""
    state: str
    """Kernel state letter (``R S D T t Z``...) or ``gone``."""
    cpu_s: float | None = None
    """User + system CPU time so far, seconds."""
    threads: int | None = None
    """Threads of the process."""
    at: float = 0.0
    """When it was read (monotonic seconds)."""
    exit_status: int | None = None
    """For a zombie: how it ended, as ``waitpid`` reports it (``stat`` field 52; the killing signal in the low bits)."""


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    """A worker's health verdict (``health`` in ``workers status --json``)."""

    verdict: str
    """``ok`` or a cause: ``rank_stopped``, ``rank_dead``, ``rank_blocked``, ``collective_wait``, ``engine_idle``,
    ``unknown``."""
    rank: int | None = None
    """The rank the verdict names."""
    pid: int | None = None
    """That rank's process."""
    message: str = ""
    """One line for humans, with the fix where there is one."""
    evidence: tuple[str, ...] = ()
    """What the verdict rests on, one fact per entry."""
