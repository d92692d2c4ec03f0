"""NVIDIA GPUs through NVML (``nvidia-ml-py``'s ``pynvml`` module).

Handles are looked up once; a field that answers NOT_SUPPORTED (or no permission) is remembered and never asked
again, so a poll costs only the calls that can give a value. An error on one GPU marks that GPU lost (flag
``gpu_lost``) and leaves the others updating; ``GPU_IS_LOST`` is sticky, any other error is retried next poll.
"""

from __future__ import annotations

import importlib
import socket
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from amdtop.errors import BackendUnavailable
from amdtop.model import (
    EccCount,
    Flag,
    FlagKind,
    GpuInfo,
    GpuProcess,
    GpuSample,
    Link,
    LinkType,
    NodeSnapshot,
    Topology,
    XgmiLinkCounters,
)
from amdtop.sysread import read_text
from amdtop.telemetry.base import BackendOptions, ProcessCadence
from amdtop.telemetry.nvml_host import host_numa_nodes, mask_to_cpus, normalize_bdf, pci_numa_node
from amdtop.telemetry.nvml_procutil import ProcessUtilization
from amdtop.telemetry.plausible import plausible

# NVML return codes (stable ABI values, nvml.h) that mean "this field is not available here", not "GPU broken".
_SOFT_ERRORS = frozenset(
    {2, 3, 4, 6, 13}
)  # INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, FUNCTION_NOT_FOUND
_GPU_IS_LOST = 15
_CPU_SET_WORDS = 16  # 1024 CPUs: a fixed size keeps the call (and a recorded fixture) independent of the host
_NVLINK_GBS_PER_LINK = 25  # NVLink 2-4: 25 GB/s per direction per link
_TOPOLOGY_SYSTEM = 50  # NVML_TOPOLOGY_SYSTEM: the path crosses the inter-socket link
# nvmlClocksEventReason* bits -> amdtop's throttle reasons (nvml.h).
_EVENT_REASONS = (
    (0x1, "idle"),
    (0x2, "app_clocks"),
    (0x4, "power_cap"),  # SW power cap
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "thermal"),  # SW thermal slowdown
    (0x40, "thermal"),  # HW thermal slowdown
    (0x80, "power_brake"),
    (0x100, "display"),
)
# NVML_FI_DEV_PERF_POLICY_* fields: time (ns) spent held back by each policy since the driver loaded, stamped (µs).
# Reading them costs ~1 ms of CPU on an H200 (nvmlDeviceGetViolationStatus ~0.7 ms per policy; clock-event reasons
# 2.5 µs; bench/nvml_call_cost.py), so they are read in one field-values call every VIOLATION_EVERY_POLLS polls; the
# share over a window comes from the counter deltas between refreshes, so it stays exact.
_VIOLATION_FIELDS = ((74, "power_cap"), (75, "thermal"), (77, "board_limit"), (79, "reliability"))
VIOLATION_EVERY_POLLS = 5
# NVML_MEMORY_LOCATION_* -> block name; volatile counts (since the driver loaded, as AMD's RAS counts are).
_ECC_LOCATIONS = ((2, "dram"), (7, "sram"))
_VOLATILE_ECC = 0
# ECC queries cost far more than the other fields (they go to the driver's RM), and counts change rarely: read them
# every this many polls and repeat the last reading in between.
ECC_EVERY_POLLS = 10
_NVLINK_TX, _NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB per link (scopeId = link)


def _err_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class _Device:
    index: int
    handle: Any
    unsupported: set[str] = field(default_factory=set)
    lost_reason: str | None = None
    nvlinks: list[tuple[int, str | None]] = field(default_factory=list)
    ecc: tuple[EccCount, ...] | None = None
    ecc_age: int = 0
    violations: tuple[tuple[tuple[str, float], ...] | None, float | None] = (None, None)
    violations_age: int = 0
    """Polls since :attr:`ecc` was read (0: read at the next poll)."""
    """(link id, remote GPU BDF or ``None`` for an NVSwitch) of each active NVLink, filled with the topology."""
    procs: tuple[GpuProcess, ...] = ()
    """The process list of the last process reading (repeated, the same tuple, until the next)."""


class NvmlBackend:
    """Telemetry from NVML; ``nvml`` is the ``pynvml`` module (or a replaying stand-in in tests)."""

    name = "nvml"

    def __init__(self, nvml: ModuleType | Any, options: BackendOptions) -> None:
        """Initialise NVML and read the static topology.

        Raises:
            BackendUnavailable: NVML cannot initialise or finds no GPU.
        """
        self._nvml = nvml
        self._options = options
        try:
            nvml.nvmlInit()
        except Exception as exc:  # pynvml raises NVMLError subclasses, OSError or others when the driver is absent
            raise BackendUnavailable(f"NVML did not initialise ({exc})") from None
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._devices = [_Device(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except nvml.NVMLError as exc:
            self._shutdown()
            raise BackendUnavailable(f"NVML could not list GPUs ({exc})") from None
        if not self._devices:
            self._shutdown()
            raise BackendUnavailable("NVML found no GPU")
        self._hostname = socket.gethostname()
        # pid -> comm of GPU processes, kept while the pid stays on a GPU: a process listed poll after poll is
        # the same process (its pid can only be reused after it exits and drops off NVML's list).
        self._names: dict[int, str | None] = {}
        self._seen: set[int] = set()
        self._proc_util = ProcessUtilization(nvml)
        # Process lists are read every options.processes_every_s (monotonic clock), not every poll: on a busy GPU
        # nvmlDeviceGetProcessUtilization was most of the poll's CPU (session 12's py-spy of the serve).
        self._cadence = ProcessCadence(options.processes_every_s)
        self._topology = self._read_topology()

    # -- static -------------------------------------------------------------------------------------------------

    def _soft(self, dev: _Device, key: str, fn: Any, *args: Any) -> Any:
        """Call ``fn``; ``None`` (remembered) when the field is not supported on this GPU."""
        if key in dev.unsupported:
            return None
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            if _err_code(exc) in _SOFT_ERRORS:
                dev.unsupported.add(key)
                return None
            raise

    def _static_soft(self, dev: _Device, key: str, fn: Any, *args: Any) -> Any:
        # At start-up any error on an optional field is survivable: the GPU will show as lost at the first poll.
        try:
            return self._soft(dev, key, fn, *args)
        except self._nvml.NVMLError:
            return None

    def _read_topology(self) -> Topology:
        nv = self._nvml
        numa_nodes = host_numa_nodes(self._options.sysfs_root)
        node_cpus = {n.id: n.cpus for n in numa_nodes}
        gpus: list[GpuInfo] = []
        self._bdfs: list[str] = []
        for dev in self._devices:
            h = dev.handle
            name = self._static_soft(dev, "name", nv.nvmlDeviceGetName, h)
            pci = self._static_soft(dev, "pci", nv.nvmlDeviceGetPciInfo, h)
            bdf = normalize_bdf(pci.busId) if pci is not None else ""
            self._bdfs.append(bdf)
            uuid = self._static_soft(dev, "uuid", nv.nvmlDeviceGetUUID, h)
            mem = self._static_soft(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            cap_mw = self._static_soft(dev, "power_cap", nv.nvmlDeviceGetEnforcedPowerLimit, h)
            numa = self._static_soft(dev, "numa", nv.nvmlDeviceGetNumaNodeId, h)
            numa = int(numa) if numa is not None and int(numa) >= 0 else pci_numa_node(self._options.sysfs_root, bdf)
            mask = self._static_soft(dev, "cpu_affinity", nv.nvmlDeviceGetCpuAffinity, h, _CPU_SET_WORDS)
            cpus = mask_to_cpus([int(w) for w in mask]) if mask is not None else ()
            if not cpus and numa is not None:
                cpus = node_cpus.get(numa, ())
            gpus.append(
                GpuInfo(
                    index=dev.index,
                    name=_text(name) if name is not None else "NVIDIA GPU",
                    bdf=bdf,
                    numa_node=numa,
                    vendor="NVIDIA",
                    uuid=_text(uuid) if uuid is not None else None,
                    vram_total_bytes=int(mem.total) if mem is not None else None,
                    cpu_affinity=cpus,
                    power_cap_w=cap_mw / 1000.0 if cap_mw is not None else None,
                )
            )
        return Topology(tuple(gpus), self._read_links(), numa_nodes)

    def _nvlink_peers(self, dev: _Device) -> tuple[dict[str, int], int]:
        """Active NVLinks of ``dev``: count per remote GPU BDF, and count of links to NVSwitches."""
        nv = self._nvml
        peers: dict[str, int] = {}
        to_switch = 0
        dev.nvlinks = []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                state = nv.nvmlDeviceGetNvLinkState(dev.handle, link)
            except nv.NVMLError:
                break  # past the last link (INVALID_ARGUMENT) or no NVLink at all (NOT_SUPPORTED)
            if int(state) != 1:  # NVML_FEATURE_ENABLED
                continue
            try:
                remote = normalize_bdf(nv.nvmlDeviceGetNvLinkRemotePciInfo(dev.handle, link).busId)
            except nv.NVMLError:
                continue
            try:
                is_switch = int(nv.nvmlDeviceGetNvLinkRemoteDeviceType(dev.handle, link)) == 2
            except nv.NVMLError:
                is_switch = remote not in self._bdfs
            dev.nvlinks.append((link, None if is_switch else remote))
            if is_switch:
                to_switch += 1
            else:
                peers[remote] = peers.get(remote, 0) + 1
        return peers, to_switch

    def record_nvlinks(self) -> list[tuple[dict[str, int], int]]:
        """NVLink peers of every GPU (what the link reading asks NVML), for the fixture recorder."""
        return [self._nvlink_peers(dev) for dev in self._devices]

    def _read_links(self) -> tuple[Link, ...]:
        nv = self._nvml
        if len(self._devices) < 2:
            return ()
        nvl = [self._nvlink_peers(dev) for dev in self._devices]
        links: list[Link] = []
        for a, da in enumerate(self._devices):
            for b in range(a + 1, len(self._devices)):
                direct = nvl[a][0].get(self._bdfs[b], 0)
                # Through NVSwitch every GPU reaches every other over all its switch links (nvidia-smi: NV18).
                switched = min(nvl[a][1], nvl[b][1])
                n = direct + switched
                if n:
                    links.append(
                        Link(
                            a, b, LinkType.NVLINK, hops=1, nvlinks=n, max_bandwidth_mbs=n * _NVLINK_GBS_PER_LINK * 1000
                        )
                    )
                    continue
                try:
                    level = int(nv.nvmlDeviceGetTopologyCommonAncestor(da.handle, self._devices[b].handle))
                except nv.NVMLError:
                    links.append(Link(a, b, LinkType.UNKNOWN))
                    continue
                links.append(Link(a, b, LinkType.PCIE, hops=3 if level >= _TOPOLOGY_SYSTEM else 2))
        return tuple(links)

    # -- per poll -----------------------------------------------------------------------------------------------

    def topology(self) -> Topology:
        """Return the static topology."""
        return self._topology

    def _process_name(self, pid: int) -> str | None:
        self._seen.add(pid)
        if pid in self._names:
            return self._names[pid]
        try:
            name = read_text(self._options.proc_root / str(pid) / "comm").strip() or None
        except OSError:
            name = None  # another PID namespace or already gone; not retried while the pid stays listed
        self._names[pid] = name
        return name

    def request_processes(self) -> None:
        """Read the process lists at the next poll (a worker was launched or stopped); safe from any thread."""
        self._cadence.request()

    def _read_processes(self, dev: _Device) -> tuple[GpuProcess, ...]:
        nv, h = self._nvml, dev.handle
        procs = self._soft(dev, "procs", nv.nvmlDeviceGetComputeRunningProcesses, h) or []
        # Per-process SM share only where a process is listed: an idle GPU costs no extra call.
        busy = self._proc_util.read(dev.index, h) if procs else None
        return tuple(
            GpuProcess(
                int(p.pid),
                self._process_name(int(p.pid)),
                int(p.usedGpuMemory) if p.usedGpuMemory is not None else None,
                gpu_util_pct=None if busy is None else busy.get(int(p.pid), 0.0),
            )
            for p in procs
        )

    def _sample_gpu(self, dev: _Device, read_procs: bool = True) -> GpuSample:
        nv = self._nvml
        h = dev.handle
        util = self._soft(dev, "util", nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._soft(dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = self._soft(dev, "power", nv.nvmlDeviceGetPowerUsage, h)
        temp = self._soft(dev, "temp", nv.nvmlDeviceGetTemperature, h, 0)  # NVML_TEMPERATURE_GPU
        sclk = self._soft(dev, "sclk", nv.nvmlDeviceGetClockInfo, h, 1)  # NVML_CLOCK_SM
        mclk = self._soft(dev, "mclk", nv.nvmlDeviceGetClockInfo, h, 2)  # NVML_CLOCK_MEM
        if read_procs:
            dev.procs = self._read_processes(dev)
        acc, clock = self._violations(dev)
        return GpuSample(
            index=dev.index,
            util_pct=float(util.gpu) if util is not None else None,
            vram_used_bytes=int(mem.used) if mem is not None else None,
            vram_total_bytes=int(mem.total) if mem is not None else None,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            temp_c=float(temp) if temp is not None else None,
            mem_temp_c=None,
            sclk_mhz=float(sclk) if sclk is not None else None,
            mclk_mhz=float(mclk) if mclk is not None else None,
            mem_util_pct=float(util.memory) if util is not None else None,
            processes=dev.procs,
            xgmi_links=self._nvlink_counters(dev),
            throttle_active=self._event_reasons(dev),
            throttle_acc=acc,
            throttle_clock=clock,
            ecc=self._ecc(dev),
        )

    def _event_reasons(self, dev: _Device) -> tuple[str, ...] | None:
        bits = self._soft(dev, "event_reasons", self._nvml.nvmlDeviceGetCurrentClocksEventReasons, dev.handle)
        if bits is None:
            return None
        return tuple(sorted({name for bit, name in _EVENT_REASONS if int(bits) & bit}))

    def _violations(self, dev: _Device) -> tuple[tuple[tuple[str, float], ...] | None, float | None]:
        """Cumulative time at each limit (s) and the NVML timestamp (s) of that reading."""
        if dev.violations_age % VIOLATION_EVERY_POLLS:
            dev.violations_age += 1
            return dev.violations
        dev.violations_age = 1
        ids = [fid for fid, _ in _VIOLATION_FIELDS]
        values = self._soft(dev, "violations", self._nvml.nvmlDeviceGetFieldValues, dev.handle, ids)
        acc: list[tuple[str, float]] = []
        clock: float | None = None
        names = dict(_VIOLATION_FIELDS)
        for v in values or ():
            if int(v.nvmlReturn) != 0 or int(v.fieldId) not in names:
                continue
            acc.append((names[int(v.fieldId)], int(v.value.ullVal) / 1e9))  # ns
            if clock is None:
                clock = int(v.timestamp) / 1e6  # µs
        dev.violations = (tuple(acc), clock) if acc and clock is not None else (None, None)
        return dev.violations

    def _ecc(self, dev: _Device) -> tuple[EccCount, ...] | None:
        if dev.ecc_age % ECC_EVERY_POLLS:
            dev.ecc_age += 1
            return dev.ecc
        dev.ecc = self._read_ecc(dev)
        dev.ecc_age = 1
        return dev.ecc

    def _read_ecc(self, dev: _Device) -> tuple[EccCount, ...] | None:
        nv, h = self._nvml, dev.handle
        out: list[EccCount] = []
        ce = self._soft(dev, "ecc_total_ce", nv.nvmlDeviceGetTotalEccErrors, h, 0, _VOLATILE_ECC)
        ue = self._soft(dev, "ecc_total_ue", nv.nvmlDeviceGetTotalEccErrors, h, 1, _VOLATILE_ECC)
        if ce is not None or ue is not None:
            out.append(EccCount("total", None if ce is None else int(ce), None if ue is None else int(ue)))
        for loc, block in _ECC_LOCATIONS:
            fn = nv.nvmlDeviceGetMemoryErrorCounter
            lce = self._soft(dev, f"ecc_{block}_ce", fn, h, 0, _VOLATILE_ECC, loc)
            lue = self._soft(dev, f"ecc_{block}_ue", fn, h, 1, _VOLATILE_ECC, loc)
            if lce is not None or lue is not None:
                out.append(EccCount(block, None if lce is None else int(lce), None if lue is None else int(lue)))
        return tuple(out) or None

    def _nvlink_counters(self, dev: _Device) -> tuple[XgmiLinkCounters, ...] | None:
        if not dev.nvlinks:
            return None
        ids = [(fid, link) for link, _ in dev.nvlinks for fid in (_NVLINK_RX, _NVLINK_TX)]
        values = self._soft(dev, "nvlink_throughput", self._nvml.nvmlDeviceGetFieldValues, dev.handle, ids)
        if values is None:
            return None
        got: dict[tuple[int, int], int] = {}
        for v in values:
            if int(v.nvmlReturn) == 0:
                got[(int(v.fieldId), int(v.scopeId))] = int(v.value.ullVal)
        out = []
        for link, peer in dev.nvlinks:
            rx, tx = got.get((_NVLINK_RX, link)), got.get((_NVLINK_TX, link))
            # KiB -> KB, the unit the AMD counters and the rate code use.
            out.append(
                XgmiLinkCounters(
                    link, peer, None if rx is None else rx * 1024 // 1000, None if tx is None else tx * 1024 // 1000
                )
            )
        return tuple(out) if any(c.read_kb is not None or c.write_kb is not None for c in out) else None

    def sample(self) -> NodeSnapshot:
        """Poll every GPU once; a GPU that errors is reported lost and the others still update."""
        samples: list[GpuSample] = []
        flags: list[Flag] = []
        read_procs = self._cadence.due()
        if read_procs:
            self._seen = set()
        for dev in self._devices:
            reason = dev.lost_reason
            if reason is None:
                try:
                    samples.append(plausible(self._sample_gpu(dev, read_procs)))
                    continue
                except self._nvml.NVMLError as exc:
                    reason = f"NVML: {exc}"
                    if _err_code(exc) == _GPU_IS_LOST:
                        dev.lost_reason = reason
            samples.append(GpuSample(dev.index, lost=True, error=reason))
            flags.append(Flag(FlagKind.GPU_LOST, f"GPU {dev.index} lost: {reason}", gpus=(dev.index,)))
        if read_procs and len(self._names) > len(self._seen):
            self._names = {pid: name for pid, name in self._names.items() if pid in self._seen}
        return NodeSnapshot(
            "nvml",
            self._hostname,
            time.time(),
            self._topology,
            tuple(samples),
            tuple(flags),
            processes_at=self._cadence.read_at,
        )

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # closing must never fail a command
            pass

    def close(self) -> None:
        """Shut NVML down."""
        self._shutdown()


def open_backend(options: BackendOptions) -> NvmlBackend:
    """Open NVML (``pynvml`` from nvidia-ml-py).

    Raises:
        BackendUnavailable: pynvml is missing, NVML cannot start, or there is no NVIDIA GPU.
    """
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        raise BackendUnavailable("pynvml (nvidia-ml-py) is not installed") from None
    return NvmlBackend(nvml, options)
