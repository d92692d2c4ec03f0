"""Partitions through amdsmi (7.x): the library hands out one processor handle per compute partition.

On a CPX node ``amdsmi_get_processor_handles()`` returns 64 handles for 8 GPUs (63 on the real capture where one GPU
exposed 7 partitions). The handles of one GPU share its PCI domain/bus/device; the partition is
``amdsmi_get_gpu_kfd_info()["current_partition_id"]`` (the BDF function bits otherwise). amdtop keeps one GPU per
physical device -- the partition-0 handle, which is the real PCI function and answers the device metrics -- and
describes the others as :class:`Partition` (KFD node and gpu_id from ``kfd_info``, render minor and HIP index from
``amdsmi_get_gpu_enumeration_info``; the HIP index falls back to the rank of the KFD node among all handles).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from amdtop.model import GpuInfo, GpuProcess, Partition
from amdtop.telemetry.partitions import COMPUTE_MODES, MEMORY_MODES, parse_mode

Getter = Callable[..., Any]
"""The backend's ``_get(fn, *args, key=None)``: the call's result, ``None`` when the library raises."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class HandleFacts:
    """What one processor handle says about where it sits."""

    handle: Any
    bdf: str
    partition: int
    kfd_node: int | None
    gpu_id: int | None
    render_minor: int | None
    hip_index: int | None
    numa_node: int | None


def read_facts(smi: ModuleType, handle: Any, get: Getter) -> HandleFacts:
    """BDF, partition, KFD node/gpu_id, render minor, HIP index and KFD NUMA node of one handle."""
    bdf = str(get(smi.amdsmi_get_gpu_device_bdf, handle) or "").lower()
    kfd = get(smi.amdsmi_get_gpu_kfd_info, handle) or {}
    enum = get(smi.amdsmi_get_gpu_enumeration_info, handle) or {}
    part = _int(kfd.get("current_partition_id"))
    if part is None:
        part = int(bdf[-1], 16) & 0x7 if bdf[-1:].isalnum() else 0
    return HandleFacts(
        handle=handle,
        bdf=bdf,
        partition=part,
        kfd_node=_int(kfd.get("node_id")),
        gpu_id=_int(kfd.get("kfd_id")),
        render_minor=_int(enum.get("drm_render")),
        hip_index=_int(enum.get("hip_id")),
        numa_node=_int(get(smi.amdsmi_topo_get_numa_node_number, handle)),
    )


def group_handles(facts: Sequence[HandleFacts]) -> list[list[HandleFacts]]:
    """Handles (in KFD order) grouped per physical GPU (same domain:bus:device), partition 0 first in each group."""
    groups: dict[str, list[HandleFacts]] = {}
    for f in facts:
        key = f.bdf[:-1] if f.bdf else f"handle-{f.handle.value}"
        groups.setdefault(key, []).append(f)
    out = []
    for members in groups.values():
        members.sort(key=lambda f: f.partition)
        out.append(members)
    return out


def _hip_fallback(facts: Sequence[HandleFacts]) -> dict[int, int]:
    nodes = sorted(f.kfd_node for f in facts if f.kfd_node is not None)
    return {node: rank for rank, node in enumerate(nodes)}


def with_partitions(
    info: GpuInfo, smi: ModuleType, members: Sequence[HandleFacts], every: Sequence[HandleFacts], get: Getter
) -> GpuInfo:
    """``info`` with the GPU's partition modes (from its partition-0 handle) and partitions (one per handle)."""
    primary = members[0].handle
    compute = parse_mode(get(smi.amdsmi_get_gpu_compute_partition, primary), COMPUTE_MODES)
    memory = parse_mode(get(smi.amdsmi_get_gpu_memory_partition, primary), MEMORY_MODES)
    caps = get(smi.amdsmi_get_gpu_memory_partition_config, primary, key="partition_caps")
    available_memory = tuple(c for c in caps if c in MEMORY_MODES) if isinstance(caps, list) else ()
    parts: tuple[Partition, ...] = ()
    if len(members) > 1 or compute not in (None, "SPX"):
        rank = _hip_fallback(every)
        parts = tuple(
            Partition(
                index=f.partition,
                kfd_node=f.kfd_node,
                gpu_id=f.gpu_id,
                render_minor=f.render_minor,
                hip_index=f.hip_index if f.hip_index is not None else rank.get(f.kfd_node or -1),
                numa_node=f.numa_node,
            )
            for f in members
        )
    return replace(
        info,
        compute_partition=compute,
        memory_partition=memory,
        available_memory_partitions=available_memory,
        partitions=parts,
    )


def tag_processes(processes: Sequence[GpuProcess], partition: int) -> list[GpuProcess]:
    """The processes one partition handle lists, marked with that partition."""
    return [replace(p, partition=partition) for p in processes]
