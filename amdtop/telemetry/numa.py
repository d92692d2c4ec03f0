"""Host NUMA nodes from ``<sysfs>/devices/system/node`` (shared by the sysfs and amdsmi backends)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from amdtop.cpulist import parse_cpulist
from amdtop.model import NumaNode
from amdtop.sysread import read_text

_NODE_DIR = re.compile(r"node(\d+)$")
_MEMTOTAL = re.compile(r"MemTotal:\s+(\d+)\s*kB")


def read_numa_nodes(sysfs_root: Path) -> tuple[NumaNode, ...]:
    """Every host NUMA node with its CPUs and memory, sorted by id; ``()`` when the tree has no node directory.

    Unreadable parts give empty CPUs / ``None`` memory rather than an error: NUMA facts decorate the view, they must
    not stop it.
    """
    base = sysfs_root / "devices" / "system" / "node"
    try:
        names = [(int(m.group(1)), name) for name in os.listdir(base) if (m := _NODE_DIR.match(name))]
    except OSError:
        return ()
    nodes = []
    for node_id, name in sorted(names):
        node_dir = base / name
        try:
            cpus = parse_cpulist(read_text(node_dir / "cpulist"))
        except (OSError, ValueError):
            cpus = ()
        mem: int | None = None
        try:
            found = _MEMTOTAL.search(read_text(node_dir / "meminfo"))
            mem = int(found.group(1)) * 1024 if found else None
        except OSError:
            mem = None
        nodes.append(NumaNode(node_id, cpus, mem))
    return tuple(nodes)


def cpus_of(nodes: tuple[NumaNode, ...], node_id: int | None) -> tuple[int, ...]:
    """CPUs of NUMA node ``node_id`` (``()`` when unknown)."""
    for node in nodes:
        if node.id == node_id:
            return node.cpus
    return ()
