"""MI300-class compute/memory partitions from sysfs and KFD (amd.md §5).

* The modes live on the physical PCI device: ``current_compute_partition`` (``SPX|DPX|QPX|CPX``),
  ``current_memory_partition`` (``NPS1|NPS2|NPS4|NPS8``) and their ``available_*`` lists (``"SPX, DPX, QPX, CPX"``).
* Each compute partition is its own KFD node. The partitions of one GPU share ``unique_id`` (and ``hive_id``) and
  its PCI bus/device; the partition index is in the function bits of ``location_id`` (bus 0x05 -> 1280..1287,
  ``05:00.0``..``05:00.7``) while only function 0 is a real PCI device. A GPU may expose fewer partitions than its
  mode has (a real 8x MI300X CPX capture shows one GPU with 7 of 8).
* HIP (ROCr) makes one device per GPU node in KFD node order, so the HIP index is the node's rank among all GPU
  nodes of the node: a running count across GPUs, not ``gpu * partitions_per_gpu + partition`` (which breaks as
  soon as one GPU exposes fewer partitions, or modes differ between GPUs).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from amdtop.model import GpuInfo, Partition
from amdtop.sysread import read_text
from amdtop.telemetry.kfd import KfdNode, cpu_node_of, parse_properties

COMPUTE_MODES = ("SPX", "DPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8")
_FB_HEAPS = frozenset({1, 2})  # HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC / _PRIVATE: the GPU's own memory
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True, slots=True)
class PartitionModes:
    """The partition files of one PCI device (``None``/``()`` where a file is absent or unreadable)."""

    compute: str | None = None
    memory: str | None = None
    available_compute: tuple[str, ...] = ()
    available_memory: tuple[str, ...] = ()


def parse_mode(text: str | None, allowed: tuple[str, ...]) -> str | None:
    """``"CPX\\n"`` -> ``"CPX"``; anything not one of ``allowed`` (``UNKNOWN``, garbage, empty) -> ``None``."""
    if text is None:
        return None
    word = text.strip().upper()
    return word if word in allowed else None


def parse_modes(text: str | None, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """``"SPX, DPX, QPX, CPX"`` -> the known modes in the order given, each once."""
    if text is None:
        return ()
    out: list[str] = []
    for word in _SPLIT.split(text.strip().upper()):
        if word in allowed and word not in out:
            out.append(word)
    return tuple(out)


def _read(path: Path) -> str | None:
    try:
        return read_text(path)
    except OSError:
        return None


def read_modes(device_dir: Path) -> PartitionModes:
    """The partition mode files of a PCI device directory."""
    return PartitionModes(
        compute=parse_mode(_read(device_dir / "current_compute_partition"), COMPUTE_MODES),
        memory=parse_mode(_read(device_dir / "current_memory_partition"), MEMORY_MODES),
        available_compute=parse_modes(_read(device_dir / "available_compute_partition"), COMPUTE_MODES),
        available_memory=parse_modes(_read(device_dir / "available_memory_partition"), MEMORY_MODES),
    )


def physical_key(node: KfdNode) -> tuple[int, int, int]:
    """What the partitions of one GPU share: PCI domain, bus/device (``location_id`` without function), unique_id."""
    props = node.props
    return props.get("domain", 0), props.get("location_id", 0) >> 3, props.get("unique_id", 0)


def partition_index(node: KfdNode) -> int:
    """The partition index of a GPU node: the PCI function bits of its ``location_id``."""
    return node.props.get("location_id", 0) & 0x7


def primary_bdf(node: KfdNode) -> str | None:
    """The real PCI device of a partition node (function 0)."""
    bdf = node.bdf
    return None if bdf is None else bdf[:-1] + "0"


def hip_indices(nodes: tuple[KfdNode, ...]) -> dict[int, int]:
    """KFD node index -> HIP device index: GPU nodes numbered in node order (ROCr's agent order)."""
    gpu_nodes = sorted(n.node for n in nodes if n.is_gpu)
    return {node: hip for hip, node in enumerate(gpu_nodes)}


def group_by_gpu(nodes: tuple[KfdNode, ...]) -> dict[str, tuple[KfdNode, ...]]:
    """Primary BDF -> the GPU nodes of that physical GPU, in node order."""
    groups: dict[tuple[int, int, int], list[KfdNode]] = {}
    for n in sorted(nodes, key=lambda n: n.node):
        if n.is_gpu and "location_id" in n.props:
            groups.setdefault(physical_key(n), []).append(n)
    out: dict[str, tuple[KfdNode, ...]] = {}
    for members in groups.values():
        bdf = primary_bdf(members[0])
        if bdf is not None and bdf not in out:
            out[bdf] = tuple(members)
    return out


def mem_bytes(sysfs_root: Path, node: int) -> int | None:
    """The node's own memory per KFD ``mem_banks`` (frame-buffer heaps); ``None`` when KFD lists none."""
    base = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes" / str(node) / "mem_banks"
    try:
        banks = os.listdir(base)
    except OSError:
        return None
    total = 0
    found = False
    for bank in banks:
        text = _read(base / bank / "properties")
        if text is None:
            continue
        props = parse_properties(text)
        if props.get("heap_type") in _FB_HEAPS and "size_in_bytes" in props:
            total += props["size_in_bytes"]
            found = True
    return total if found else None


def _cus(props: dict[str, int]) -> int | None:
    simd, per_cu = props.get("simd_count", 0), props.get("simd_per_cu", 0)
    return simd // per_cu if simd and per_cu else None


def build_partitions(
    members: tuple[KfdNode, ...],
    modes: PartitionModes,
    hip: dict[int, int],
    by_node: dict[int, KfdNode],
    sysfs_root: Path | None = None,
) -> tuple[Partition, ...]:
    """The partitions of one GPU; ``()`` when it is not partitioned (one node and no mode other than SPX)."""
    if len(members) <= 1 and modes.compute in (None, "SPX"):
        return ()
    parts = [
        Partition(
            index=partition_index(n),
            kfd_node=n.node,
            gpu_id=n.gpu_id,
            render_minor=n.props.get("drm_render_minor"),
            hip_index=hip.get(n.node),
            numa_node=cpu_node_of(n, by_node),
            mem_bytes=None if sysfs_root is None else mem_bytes(sysfs_root, n.node),
            compute_units=_cus(n.props),
        )
        for n in members
    ]
    return tuple(sorted(parts, key=lambda p: p.index))


def with_partitions(
    info: GpuInfo,
    device_dir: Path,
    nodes: tuple[KfdNode, ...],
    sysfs_root: Path | None = None,
) -> GpuInfo:
    """``info`` with its partition modes and partitions filled from sysfs + KFD."""
    modes = read_modes(device_dir)
    members = group_by_gpu(nodes).get(info.bdf, ())
    by_node = {n.node: n for n in nodes}
    return replace(
        info,
        compute_partition=modes.compute,
        memory_partition=modes.memory,
        available_compute_partitions=modes.available_compute,
        available_memory_partitions=modes.available_memory,
        partitions=build_partitions(members, modes, hip_indices(nodes), by_node, sysfs_root),
    )


def partition_gpu_ids(info: GpuInfo) -> dict[int, int]:
    """KFD gpu_id of each partition -> partition index (for ``vram_<gpu_id>`` per-process files)."""
    return {p.gpu_id: p.index for p in info.partitions if p.gpu_id}
