"""A simulated node: 8x MI300X by default, for ``--demo`` and for tests that need a known ground truth.

Deterministic: the n-th sample depends only on the seed, the scenario, the demand set by the simulated workers
and the injected clock, so SVG snapshots and assertions are stable run to run.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from amdtop.hip_devices import hip_devices
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
    NumaNode,
    Partition,
    Topology,
    XgmiLinkCounters,
)
from amdtop.telemetry.base import BackendOptions

GIB = 1024**3
MI300X_VRAM = 206_141_652_992  # what mem_info_vram_total reads on MI300X (192 GiB less 16 MiB)
MI300X_BDFS = (
    "0000:05:00.0",
    "0000:26:00.0",
    "0000:46:00.0",
    "0000:65:00.0",
    "0000:85:00.0",
    "0000:a6:00.0",
    "0000:c6:00.0",
    "0000:e5:00.0",
)
# What a fully busy TP rank pushes to its group peers over XGMI (all-reduce traffic of decoding), bytes/s, split
# evenly over the peers; the reads mirror the peers' writes.
TP_XGMI_BYTES_PER_S = 40e9
SIM_THROTTLE_REASONS = ("prochot", "power_cap", "socket_thermal", "vr_thermal", "hbm_thermal")
SIM_RAS_BLOCKS = ("gfx", "umc", "xgmi_wafl")
SCENARIOS = ("mi300x-8", "mi300x-8-cpx", "pcie-4", "empty")
PARTITION_COUNT = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
NPS_COUNT = {"NPS1": 1, "NPS4": 4}
MI300X_MODES = {"SPX": ("NPS1",), "DPX": ("NPS1",), "QPX": ("NPS1", "NPS4"), "CPX": ("NPS1", "NPS4")}
"""The compute/memory pairs MI300X offers (amd-smi's partition listing): a compute partition never spans more than
one memory partition (the driver shares each memory partition among whole compute partitions), so SPX and DPX run
only in NPS1, QPX and CPX in NPS1 or NPS4."""
MI300X_CUS = 304


def _pairs() -> str:
    return ", ".join(f"{c}/{m}" for c, modes in MI300X_MODES.items() for m in modes)


def parse_partition(text: str) -> tuple[str, str]:
    """``CPX`` or ``CPX/NPS4`` -> (compute mode, memory mode); the memory mode defaults to NPS4 for CPX, else NPS1.

    Raises:
        ValueError: not a compute mode (``SPX|DPX|QPX|CPX``) optionally followed by a memory mode, or a pair MI300X
            does not offer (the message names the valid pairs).
    """
    compute, slash, memory = text.strip().upper().partition("/")
    if compute not in PARTITION_COUNT:
        raise ValueError(
            f"{text!r}: compute mode must be one of {', '.join(PARTITION_COUNT)}; MI300X offers {_pairs()}"
        )
    if not slash:
        memory = "NPS4" if compute == "CPX" else "NPS1"
    if memory not in NPS_COUNT:
        raise ValueError(f"{text!r}: memory mode must be one of {', '.join(NPS_COUNT)}; MI300X offers {_pairs()}")
    if memory not in MI300X_MODES[compute]:
        raise ValueError(f"{text!r}: no {compute} in {memory}; MI300X offers {_pairs()}")
    return compute, memory


def partition_memory(vram_total: int, compute: str) -> int:
    """HBM one compute partition holds: its memory partition's size over the compute partitions sharing it.

    That is the driver's ``amdgpu_amdkfd_xcp_memory_size`` (mem_partitions[mem_id].size / num_xcp_per_mem_partition),
    which KFD reports in the partition's ``mem_banks``; in every mode MI300X offers it comes to VRAM / compute
    partitions (CPX/NPS4: 192 GB / 4 / 2 = 24 GB; DPX/NPS1: 96 GB), so the partitions together hold the whole HBM.
    """
    return vram_total // PARTITION_COUNT[compute]


def partitioned(topology: Topology, compute: str, memory: str) -> Topology:
    """``topology`` with every GPU in ``compute``/``memory`` mode, laid out as KFD does it (amd.md §5).

    Partition p of GPU i: KFD node 2 + n*i + p (two CPU nodes first), render minor 128 + 8*i + p, HIP index n*i + p;
    memory :func:`partition_memory`, CUs 304 / n; links between GPUs weight 41 (what the partitions' io_links say).
    """
    n = PARTITION_COUNT[compute]
    ncpu = len(topology.numa_nodes)
    gpus = []
    for info in topology.gpus:
        i = info.index
        parts = tuple(
            Partition(
                index=p,
                kfd_node=ncpu + n * i + p,
                gpu_id=0x5A00 + 16 * i + p,
                render_minor=128 + 8 * i + p,
                hip_index=n * i + p,
                numa_node=info.numa_node,
                mem_bytes=partition_memory(info.vram_total_bytes or 0, compute),
                compute_units=MI300X_CUS // n,
            )
            for p in range(n)
        )
        gpus.append(
            replace(
                info,
                compute_partition=compute,
                memory_partition=memory,
                partitions=parts if n > 1 else (),
                available_compute_partitions=tuple(PARTITION_COUNT),
                available_memory_partitions=("NPS1", "NPS4"),
            )
        )
    links = topology.links
    if n > 1:
        # Real partitioned captures: XGMI io_links between partitions of different GPUs weigh 41, no bandwidth given.
        links = tuple(replace(lk, weight=41, max_bandwidth_mbs=None) for lk in links)
    return Topology(tuple(gpus), links, topology.numa_nodes)


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """What a simulated workload asks of one GPU."""

    util: float
    """Engine activity 0..1."""
    vram_bytes: int
    """Memory held."""
    pid: int | None = None
    """Process holding it, shown in the process list."""
    name: str | None = None
    """Process name."""
    partition: int | None = None
    """Compute partition the demand runs on (set by :meth:`SimBackend.set_device_demand`)."""


def _mi300x_topology() -> Topology:
    node0 = tuple(range(0, 32)) + tuple(range(64, 96))
    node1 = tuple(range(32, 64)) + tuple(range(96, 128))
    numa = (
        NumaNode(0, node0, 1536 * GIB // 2),
        NumaNode(1, node1, 1536 * GIB // 2),
    )
    gpus = tuple(
        GpuInfo(
            index=i,
            name="AMD Instinct MI300X",
            bdf=MI300X_BDFS[i],
            numa_node=0 if i < 4 else 1,
            vendor="AMD",
            uuid=f"sim-mi300x-{i}",
            vram_total_bytes=MI300X_VRAM,
            cpu_affinity=node0 if i < 4 else node1,
            power_cap_w=750.0,
        )
        for i in range(8)
    )
    links = tuple(
        Link(a, b, LinkType.XGMI, hops=1, weight=15, max_bandwidth_mbs=64000) for a in range(8) for b in range(a + 1, 8)
    )
    return Topology(gpus, links, numa)


def _pcie4_topology() -> Topology:
    node0 = tuple(range(0, 16))
    node1 = tuple(range(16, 32))
    numa = (NumaNode(0, node0, 256 * GIB), NumaNode(1, node1, 256 * GIB))
    bdfs = ("0000:03:00.0", "0000:43:00.0", "0000:83:00.0", "0000:c3:00.0")
    gpus = tuple(
        GpuInfo(
            index=i,
            name="AMD Instinct MI210",
            bdf=bdfs[i],
            numa_node=0 if i < 2 else 1,
            vendor="AMD",
            uuid=f"sim-mi210-{i}",
            vram_total_bytes=68_702_699_520,
            cpu_affinity=node0 if i < 2 else node1,
            power_cap_w=300.0,
        )
        for i in range(4)
    )
    links = []
    for a in range(4):
        for b in range(a + 1, 4):
            same = (a < 2) == (b < 2)
            links.append(Link(a, b, LinkType.PCIE, hops=2 if same else 3, weight=40 if same else 52))
    return Topology(gpus, tuple(links), numa)


def _empty_topology() -> Topology:
    return Topology((), (), (NumaNode(0, tuple(range(0, 8)), 32 * GIB),))


_TOPOLOGIES: dict[str, Callable[[], Topology]] = {
    "mi300x-8": _mi300x_topology,
    "mi300x-8-cpx": lambda: partitioned(_mi300x_topology(), "CPX", "NPS4"),
    "pcie-4": _pcie4_topology,
    "empty": _empty_topology,
}


PARTITION_ENV = "AMDTOP_SIM_PARTITION"
"""Set by the demo's profiles on a partitioned node: the mode (``CPX/NPS4``) a simulated server's devices are in."""


def mi300x_topology(partition: str | None = None) -> Topology:
    """The simulated MI300X node, in ``partition`` mode (see :func:`parse_partition`) when given."""
    topology = _mi300x_topology()
    return partitioned(topology, *parse_partition(partition)) if partition else topology


class SimBackend:
    """The simulated node. Thread-safe: workers set demand while the poller samples."""

    name = "sim"

    def __init__(
        self,
        seed: int = 0,
        scenario: str = "mi300x-8",
        clock: Callable[[], float] = time.time,
        hostname: str = "amdtop-demo",
        partition: str | None = None,
    ) -> None:
        """Build the node ``scenario``; ``clock`` gives the snapshot timestamps.

        ``partition`` (``CPX``, ``DPX/NPS1``...: see :func:`parse_partition`) puts every GPU in that mode.

        Raises:
            ValueError: unknown scenario or partition mode.
        """
        if scenario not in _TOPOLOGIES:
            raise ValueError(f"unknown sim scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        self._topology = _TOPOLOGIES[scenario]()
        if partition is not None:
            if scenario not in ("mi300x-8", "mi300x-8-cpx"):
                raise ValueError(f"sim scenario {scenario!r} has no partition modes (only the MI300X node has)")
            self._topology = partitioned(self._topology, *parse_partition(partition))
        self._rng = random.Random(seed)
        self._clock = clock
        self._hostname = hostname
        self._lock = threading.Lock()
        self._demand: dict[int, list[GpuDemand]] = {}
        self._lost: dict[int, str] = {}
        self._temps = {g.index: 35.0 for g in self._topology.gpus}
        # Fabric, throttle and RAS counters: cumulative, advanced by the injected clock (no random draws, so the
        # sequences of the other metrics are unchanged).
        self._last_t: float | None = None
        xgmi = any(link.type is LinkType.XGMI for link in self._topology.links)
        self._peers = {
            g.index: [p.index for p in self._topology.gpus if p.index != g.index] if xgmi else []
            for g in self._topology.gpus
        }
        self._xgmi_kb = {i: [[0.0, 0.0] for _ in peers] for i, peers in self._peers.items()}
        self._throttle: dict[int, tuple[str, float]] = {}
        self._thr_acc = {g.index: dict.fromkeys(SIM_THROTTLE_REASONS, 0.0) for g in self._topology.gpus}
        self._thr_clock = dict.fromkeys(self._thr_acc, 0.0)
        self._ecc = {g.index: {b: [0, 0] for b in SIM_RAS_BLOCKS} for g in self._topology.gpus}

    def topology(self) -> Topology:
        """Return the static topology."""
        return self._topology

    def set_demand(self, source: str, gpus: dict[int, GpuDemand]) -> None:
        """Replace what ``source`` (a simulated worker) asks of its GPUs; an empty dict removes it."""
        with self._lock:
            for idx in list(self._demand):
                self._demand[idx] = [d for d in self._demand[idx] if d.name != source]
            for idx, demand in gpus.items():
                self._demand.setdefault(idx, []).append(
                    GpuDemand(demand.util, demand.vram_bytes, demand.pid, source, demand.partition)
                )

    def set_device_demand(self, source: str, devices: dict[int, GpuDemand]) -> None:
        """Like :meth:`set_demand` but keyed by HIP device index, as a worker names its devices on a partitioned node.

        A partition's ``util`` (0..1 of that partition) counts as ``util / partitions`` of its GPU; its VRAM and
        process are reported on the GPU, tagged with the partition. Unknown indices are ignored.
        """
        by_hip = {d.hip_index: d for d in hip_devices(self._topology)}
        gpus: dict[int, list[GpuDemand]] = {}
        for hip, demand in devices.items():
            dev = by_hip.get(hip)
            if dev is None:
                continue
            info = self._topology.gpu(dev.gpu)
            share = max(1, len(info.partitions)) if info is not None else 1
            gpus.setdefault(dev.gpu, []).append(
                GpuDemand(demand.util / share, demand.vram_bytes, demand.pid, source, dev.partition)
            )
        with self._lock:
            for idx in list(self._demand):
                self._demand[idx] = [d for d in self._demand[idx] if d.name != source]
            for idx, demands in gpus.items():
                self._demand.setdefault(idx, []).extend(demands)

    def lose_gpu(self, index: int, reason: str = "device stopped responding") -> None:
        """Make GPU ``index`` stop answering (as a GPU that fell off the bus)."""
        with self._lock:
            self._lost[index] = reason

    def throttle(self, index: int, reason: str | None, share: float = 1.0) -> None:
        """From now on GPU ``index`` spends ``share`` of its time throttled for ``reason`` (``None``: not at all)."""
        with self._lock:
            if reason is None:
                self._throttle.pop(index, None)
            else:
                if reason not in SIM_THROTTLE_REASONS:
                    raise ValueError(f"unknown throttle reason {reason!r}; choose one of {SIM_THROTTLE_REASONS}")
                self._throttle[index] = (reason, share)

    def add_ecc_errors(self, index: int, block: str, uncorrectable: int = 0, correctable: int = 0) -> None:
        """Count new RAS errors on GPU ``index``'s ``block``."""
        with self._lock:
            counts = self._ecc[index].setdefault(block, [0, 0])
            counts[0] += correctable
            counts[1] += uncorrectable

    def _advance(self, now: float) -> None:
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        if dt <= 0:
            return
        for index, (reason, share) in self._throttle.items():
            self._thr_acc[index][reason] += share * dt * 1000.0
        for index in self._thr_clock:
            self._thr_clock[index] += dt * 1000.0  # 1 ms accumulation ticks
        groups: dict[str, dict[int, float]] = {}
        for index, demands in self._demand.items():
            if index in self._lost:
                continue
            for d in demands:
                if d.name:
                    groups.setdefault(d.name, {})[index] = groups.get(d.name, {}).get(index, 0.0) + d.util
        for members in groups.values():
            if len(members) < 2:
                continue
            for src, util in members.items():
                per_peer_kb = min(1.0, util) * TP_XGMI_BYTES_PER_S / (len(members) - 1) * dt / 1000.0
                for dst in members:
                    if dst == src or dst not in self._peers.get(src, []):
                        continue
                    self._xgmi_kb[src][self._peers[src].index(dst)][1] += per_peer_kb
                    self._xgmi_kb[dst][self._peers[dst].index(src)][0] += per_peer_kb

    def _health(self, index: int) -> dict[str, object]:
        bdfs = {g.index: g.bdf for g in self._topology.gpus}
        out: dict[str, object] = {
            "throttle_acc": tuple((r, round(v, 3)) for r, v in self._thr_acc[index].items()),
            "throttle_clock": round(self._thr_clock[index], 3),
            "throttle_active": (self._throttle[index][0],) if index in self._throttle else (),
            "ecc": tuple(EccCount(b, ce, ue, 0) for b, (ce, ue) in sorted(self._ecc[index].items())),
        }
        if self._peers[index]:
            out["xgmi_links"] = tuple(
                XgmiLinkCounters(k, bdfs[peer], int(r), int(w))
                for k, (peer, (r, w)) in enumerate(zip(self._peers[index], self._xgmi_kb[index], strict=True))
            )
        return out

    def sample(self) -> NodeSnapshot:
        """Poll every simulated GPU once."""
        now = self._clock()
        with self._lock:
            self._advance(now)
            samples = tuple(self._sample_gpu(info) for info in self._topology.gpus)
            flags = tuple(
                Flag(FlagKind.GPU_LOST, f"GPU {i} lost: {why}", gpus=(i,)) for i, why in sorted(self._lost.items())
            )
        return NodeSnapshot("sim", self._hostname, now, self._topology, samples, flags)

    def _sample_gpu(self, info: GpuInfo) -> GpuSample:
        # Draw the noise even for a lost GPU so that losing one GPU does not shift the others' sequences.
        noise = self._rng.uniform(-1.5, 1.5)
        power_noise = self._rng.uniform(-4.0, 4.0)
        if info.index in self._lost:
            return GpuSample(info.index, lost=True, error=self._lost[info.index])
        demands = self._demand.get(info.index, [])
        util_frac = min(1.0, sum(d.util for d in demands))
        vram_total = info.vram_total_bytes or 0
        base_vram = 283 * 1024**2  # what an idle MI300X reports used (driver reservations)
        vram_used = min(vram_total, base_vram + sum(d.vram_bytes for d in demands))
        util = max(0.0, min(100.0, util_frac * 100.0 + (noise if util_frac > 0 else abs(noise) * 0.2)))
        cap = info.power_cap_w or 750.0
        idle_power = cap * 0.18
        power = idle_power + (cap * 0.8 - idle_power) * (util / 100.0) + power_noise
        target_temp = 35.0 + 50.0 * util / 100.0
        self._temps[info.index] += (target_temp - self._temps[info.index]) * 0.3
        temp = round(self._temps[info.index], 1)
        processes = tuple(
            GpuProcess(d.pid or 0, d.name, d.vram_bytes, d.partition, round(min(1.0, d.util) * 100.0, 1))
            for d in demands
            if d.vram_bytes > 0
        )
        return GpuSample(
            index=info.index,
            util_pct=round(util, 1),
            vram_used_bytes=vram_used,
            vram_total_bytes=vram_total,
            power_w=round(power, 1),
            temp_c=temp,
            mem_temp_c=round(temp - 4.0, 1),
            sclk_mhz=float(round(132 + 1968 * util / 100.0)),
            mclk_mhz=1300.0,
            mem_util_pct=round(util * 0.6, 1),
            processes=processes,
            **self._health(info.index),  # type: ignore[arg-type]
        )

    def close(self) -> None:
        """Nothing to release."""


def open_backend(options: BackendOptions) -> SimBackend:
    """Open the simulated node described by ``options``."""
    return SimBackend(seed=options.seed, scenario=options.scenario, partition=options.partition)
