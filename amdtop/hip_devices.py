"""HIP device indices on a partitioned node, and TP groups over partitions.

On an SPX node HIP device ``i`` is physical GPU ``i`` (both follow KFD node order). In DPX/QPX/CPX every compute
partition is its own HIP device, numbered in KFD node order across GPUs: 8x MI300X in CPX gives HIP 0-7 on GPU 0,
8-15 on GPU 1 ... and a vLLM worker's ``gpus = [0..7]`` (HIP indices, what ``HIP_VISIBLE_DEVICES`` takes) is eight
partitions of GPU 0. Everything here is pure: it reads only a :class:`Topology`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from amdtop.model import GpuInfo, Partition, Topology, WorkerStatus


@dataclass(frozen=True, slots=True)
class HipDevice:
    """One device as HIP/vLLM number it."""

    hip_index: int
    """HIP device index (before any ``*_VISIBLE_DEVICES``)."""
    gpu: int
    """Physical GPU index (``GpuInfo.index``)."""
    partition: int | None
    """Partition index within the GPU; ``None`` for an unpartitioned GPU."""
    numa_node: int | None
    """Host NUMA node of the partition (KFD) or of the GPU."""


def hip_devices(topology: Topology) -> tuple[HipDevice, ...]:
    """Every HIP device of the node, by HIP index.

    Partitions carry the HIP index KFD gave them; an unpartitioned GPU takes the next free index after the GPUs
    before it (GPU order is KFD order, so this is what HIP does).
    """
    out: list[HipDevice] = []
    used: set[int] = set()
    nxt = 0
    for info in sorted(topology.gpus, key=lambda g: g.index):
        if not info.partitions:
            while nxt in used:
                nxt += 1
            out.append(HipDevice(nxt, info.index, None, info.numa_node))
            used.add(nxt)
            nxt += 1
            continue
        for part in info.partitions:
            hip = part.hip_index
            if hip is None or hip in used:
                while nxt in used:
                    nxt += 1
                hip = nxt
            used.add(hip)
            nxt = max(nxt, hip + 1)
            numa = part.numa_node if part.numa_node is not None else info.numa_node
            out.append(HipDevice(hip, info.index, part.index, numa))
    return tuple(sorted(out, key=lambda d: d.hip_index))


def resolve_hip_index(topology: Topology, hip_index: int) -> tuple[int, int | None] | None:
    """HIP index -> (physical GPU index, partition index or ``None``); ``None`` when no such device exists."""
    for dev in hip_devices(topology):
        if dev.hip_index == hip_index:
            return dev.gpu, dev.partition
    return None


def is_partitioned(topology: Topology) -> bool:
    """True when any GPU exposes compute partitions (HIP indices then differ from GPU indices)."""
    return any(info.partitions for info in topology.gpus)


def physical_gpus(topology: Topology, hip_indices: Iterable[int]) -> tuple[int, ...]:
    """The physical GPUs a set of HIP devices (a TP group) sits on, in first-seen order; unknown indices skipped."""
    by_hip = {d.hip_index: d for d in hip_devices(topology)}
    out: list[int] = []
    for h in hip_indices:
        dev = by_hip.get(h)
        if dev is not None and dev.gpu not in out:
            out.append(dev.gpu)
    return tuple(out)


def group_members(topology: Topology, hip_indices: Iterable[int]) -> tuple[HipDevice, ...]:
    """The devices of a TP group given by HIP index, in rank order; unknown indices skipped."""
    by_hip = {d.hip_index: d for d in hip_devices(topology)}
    return tuple(by_hip[h] for h in hip_indices if h in by_hip)


def group_numa_nodes(topology: Topology, hip_indices: Iterable[int]) -> tuple[int, ...]:
    """Distinct host NUMA nodes of a TP group's devices (partition-level where KFD says so), sorted."""
    return tuple(sorted({d.numa_node for d in group_members(topology, hip_indices) if d.numa_node is not None}))


def device_indices(topology: Topology) -> tuple[int, ...]:
    """The device indices worker profiles may name (``gpus = [...]``, ``HIP_VISIBLE_DEVICES``): HIP indices, which
    are the GPU indices on an unpartitioned node."""
    return tuple(d.hip_index for d in hip_devices(topology))


def device_numa(topology: Topology, hip_index: int) -> int | None:
    """Host NUMA node of HIP device ``hip_index`` (the partition's where KFD gives one); ``None`` if unknown."""
    for dev in hip_devices(topology):
        if dev.hip_index == hip_index:
            return dev.numa_node
    return None


def physical_worker(worker: WorkerStatus, topology: Topology) -> WorkerStatus:
    """``worker`` with its HIP indices replaced by the physical GPUs they sit on (first-seen order), so per-GPU
    analyses (imbalance, NUMA, topology groups) apply on a partitioned node; unchanged on an unpartitioned one."""
    if not is_partitioned(topology):
        return worker
    return replace(worker, gpus=physical_gpus(topology, worker.gpus))


def device_label(dev: HipDevice) -> str:
    """``GPU3`` or ``GPU3.5`` (partition 5 of GPU 3)."""
    return f"GPU{dev.gpu}" if dev.partition is None else f"GPU{dev.gpu}.{dev.partition}"


def partition_json(part: Partition) -> dict[str, Any]:
    """One ``gpus[].partitions[]`` entry of ``snapshot``/``topo --json``."""
    return {
        "index": part.index,
        "kfd_node": part.kfd_node,
        "gpu_id": part.gpu_id,
        "render_minor": part.render_minor,
        "hip_index": part.hip_index,
        "numa_node": part.numa_node,
        "mem_bytes": part.mem_bytes,
        "compute_units": part.compute_units,
    }


def partition_keys(info: GpuInfo) -> dict[str, Any]:
    """The partition keys of one ``gpus[]`` entry (contract: compute/memory mode, partitions list)."""
    return {
        "compute_partition": info.compute_partition,
        "memory_partition": info.memory_partition,
        "partitions": [partition_json(p) for p in info.partitions],
    }


def _span(values: list[int]) -> str:
    if not values:
        return "-"
    if values == list(range(values[0], values[-1] + 1)) and len(values) > 1:
        return f"{values[0]}-{values[-1]}"
    return ",".join(map(str, values))


def partition_lines(topology: Topology) -> list[str]:
    """Text lines describing each partitioned GPU (for ``topo --text``); ``[]`` on an unpartitioned node."""
    if not is_partitioned(topology):
        return []
    lines = ["Compute partitions (each one HIP device)"]
    for info in topology.gpus:
        mode = "/".join(m for m in (info.compute_partition, info.memory_partition) if m) or "mode unknown"
        if not info.partitions:
            lines.append(f"  GPU{info.index} {mode}: not partitioned")
            continue
        parts = info.partitions
        hips = _span(sorted(p.hip_index for p in parts if p.hip_index is not None))
        renders = _span(sorted(p.render_minor for p in parts if p.render_minor is not None))
        nodes = _span(sorted(p.kfd_node for p in parts if p.kfd_node is not None))
        numa = _span(sorted({p.numa_node for p in parts if p.numa_node is not None}))
        lines.append(
            f"  GPU{info.index} {mode}: {len(parts)} partitions, HIP {hips}, render minors {renders}, "
            f"KFD nodes {nodes}, NUMA {numa}"
        )
    return lines


def partition_bdf(bdf: str, partition: int) -> str:
    """PCI address HIP reports for ``partition`` of the GPU at ``bdf``: the partition index in the function bits.

    amd.md §5: KFD's ``location_id`` of a partition carries its index in the PCI function (bus 0x05: ``0000:05:00.0``
    .. ``05:00.7``), which is what HIP and RCCL print as the device's bus id.
    """
    head, dot, _fn = bdf.rpartition(".")
    return f"{head}.{partition}" if dot else bdf


def device_bdf(topology: Topology, hip_index: int) -> str | None:
    """PCI address of HIP device ``hip_index`` (a partition's own, see :func:`partition_bdf`); ``None`` if unknown."""
    for dev in hip_devices(topology):
        if dev.hip_index != hip_index:
            continue
        info = topology.gpu(dev.gpu)
        if info is None:
            return None
        return info.bdf if dev.partition is None else partition_bdf(info.bdf, dev.partition)
    return None


def bus_devices(topology: Topology) -> dict[str, tuple[int, int | None]]:
    """Every device's PCI address -> (physical GPU, partition or ``None``): a GPU and each of its partitions."""
    out: dict[str, tuple[int, int | None]] = {}
    for info in topology.gpus:
        out[info.bdf] = (info.index, None)
        for part in info.partitions:
            # Partition 0 shares function 0 with the GPU itself: a rank there is the partition.
            out[partition_bdf(info.bdf, part.index)] = (info.index, part.index)
    return out
