"""Host facts the NVML backend reads from sysfs: NUMA nodes, a GPU's NUMA node and the node's CPUs.

NVML answers NOT_SUPPORTED for the NUMA node on many systems (and on VMs), so the PCI device's ``numa_node`` file
is the fallback, as ``nvidia-smi topo -m`` does.
"""

from __future__ import annotations

from pathlib import Path

from amdtop.cpulist import parse_cpulist
from amdtop.model import NumaNode
from amdtop.sysread import decode, read_text_or_none


def _read(path: Path) -> str | None:
    return read_text_or_none(path)


def host_numa_nodes(sysfs_root: Path) -> tuple[NumaNode, ...]:
    """Host NUMA nodes with their CPUs and memory from ``<sysfs_root>/devices/system/node``."""
    base = sysfs_root / "devices" / "system" / "node"
    nodes: list[NumaNode] = []
    try:
        entries = sorted(base.iterdir(), key=lambda p: p.name)
    except OSError:
        return ()
    for entry in entries:
        name = entry.name
        if not name.startswith("node") or not name[4:].isdigit():
            continue
        try:
            cpus = parse_cpulist(_read(entry / "cpulist") or "")
        except ValueError:
            cpus = ()
        nodes.append(NumaNode(int(name[4:]), cpus, _node_mem_total(entry)))
    return tuple(sorted(nodes, key=lambda n: n.id))


def _node_mem_total(node_dir: Path) -> int | None:
    text = _read(node_dir / "meminfo")
    if not text:
        return None
    for line in text.splitlines():
        # "Node 0 MemTotal:       131072000 kB"
        if "MemTotal:" in line:
            parts = line.split("MemTotal:")[1].split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * 1024
    return None


def pci_numa_node(sysfs_root: Path, bdf: str) -> int | None:
    """NUMA node of PCI device ``bdf`` from sysfs; ``None`` when the file is missing or says -1."""
    text = _read(sysfs_root / "bus" / "pci" / "devices" / bdf / "numa_node")
    if text is None:
        return None
    try:
        node = int(text)
    except ValueError:
        return None
    return node if node >= 0 else None


def normalize_bdf(bus_id: str | bytes) -> str:
    """NVML's ``00000000:18:00.0`` (8-digit domain, upper case) to sysfs' ``0000:18:00.0``."""
    text = decode(bus_id) if isinstance(bus_id, bytes) else bus_id
    text = text.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep:
        return text
    return f"{int(domain, 16):04x}:{rest}"


def mask_to_cpus(words: list[int], bits_per_word: int = 64) -> tuple[int, ...]:
    """CPU numbers set in an affinity bitmask given as machine words (NVML's ``cpuSet``)."""
    cpus: list[int] = []
    for w, word in enumerate(words):
        for bit in range(bits_per_word):
            if word >> bit & 1:
                cpus.append(w * bits_per_word + bit)
    return tuple(cpus)
