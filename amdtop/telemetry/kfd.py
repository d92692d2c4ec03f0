"""KFD topology (``<sysfs>/class/kfd/kfd/topology``) and how rocm-smi / amd-smi turn it into link type, hops, weight.

Every ``properties`` file is ``<key> <unsigned decimal>`` lines. CPU nodes (``gpu_id`` 0) come first, then GPU nodes
in driver probe order. The pair rules follow rocm_smi (amd.md §3.1):

* a direct XGMI io_link (or p2p_link) between the two GPU nodes: type XGMI, hops 1, weight = the link's weight;
* otherwise the PCIe path through the CPUs: hops 2 when both GPUs hang off the same CPU node, 3 when their CPU nodes
  are joined by a CPU<->CPU link, 4 when not; weight = w(a->cpu) + w(b->cpu) (+ the CPU<->CPU weight across nodes,
  +10 when no such link exists).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from amdtop.model import Link, LinkType
from amdtop.sysread import read_text

IOLINK_PCIE = 2
IOLINK_XGMI = 11
_NO_CPU_LINK_PENALTY = 10


@dataclass(frozen=True, slots=True)
class KfdLink:
    """One io_link or p2p_link of a node."""

    type: int
    """KFD link type (2 PCIe, 11 XGMI, 1/5 CPU<->CPU...)."""
    node_to: int
    """Peer node index."""
    weight: int
    """Link weight (20 GPU<->CPU PCIe, 15 per XGMI hop, SLIT distance CPU<->CPU)."""
    max_bandwidth: int
    """Peak bandwidth in MB/s (0 when the kernel does not say)."""


@dataclass(frozen=True, slots=True)
class KfdNode:
    """One KFD topology node."""

    node: int
    """Node index (directory name)."""
    gpu_id: int
    """KFD gpu_id; 0 for CPU nodes."""
    props: dict[str, int]
    """The node's ``properties``."""
    io_links: tuple[KfdLink, ...]
    """Direct links."""
    p2p_links: tuple[KfdLink, ...]
    """Peer-to-peer links (indirect peers and, on newer kernels, a copy of direct ones)."""

    @property
    def is_gpu(self) -> bool:
        """True for a GPU node."""
        return self.gpu_id != 0

    @property
    def bdf(self) -> str | None:
        """PCI address from ``domain``/``location_id`` (``None`` for CPU nodes)."""
        if not self.is_gpu or "location_id" not in self.props:
            return None
        loc = self.props["location_id"]
        domain = self.props.get("domain", 0)
        return f"{domain:04x}:{loc >> 8 & 0xFF:02x}:{loc >> 3 & 0x1F:02x}.{loc & 0x7:x}"


def parse_properties(text: str) -> dict[str, int]:
    """``key value`` lines to a dict; lines that are not two fields with an integer value are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return out


def _read_links(node_dir: Path, kind: str) -> tuple[KfdLink, ...]:
    links_dir = node_dir / kind
    try:
        names = sorted(os.listdir(links_dir), key=lambda n: int(n) if n.isdigit() else -1)
    except OSError:
        return ()
    links = []
    for name in names:
        try:
            p = parse_properties(read_text(links_dir / name / "properties"))
        except OSError:
            continue
        if "node_to" in p:
            links.append(KfdLink(p.get("type", 0), p["node_to"], p.get("weight", 0), p.get("max_bandwidth", 0)))
    return tuple(links)


def read_kfd_nodes(sysfs_root: Path) -> tuple[KfdNode, ...]:
    """All KFD nodes sorted by index; ``()`` when there is no KFD topology."""
    base = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    try:
        names = sorted(int(n) for n in os.listdir(base) if n.isdigit())
    except OSError:
        return ()
    nodes = []
    for idx in names:
        node_dir = base / str(idx)
        try:
            gpu_id = int(read_text(node_dir / "gpu_id").strip() or 0)
            props = parse_properties(read_text(node_dir / "properties"))
        except (OSError, ValueError):
            continue
        nodes.append(KfdNode(idx, gpu_id, props, _read_links(node_dir, "io_links"), _read_links(node_dir, "p2p_links")))
    return tuple(nodes)


def _cpu_link(node: KfdNode, cpu_nodes: set[int]) -> KfdLink | None:
    """The lightest link from a GPU node to a CPU node (rocm_smi's ``numa_node_number``)."""
    best: KfdLink | None = None
    for link in node.io_links:
        if link.node_to in cpu_nodes and (best is None or link.weight < best.weight):
            best = link
    return best


def _direct(a: KfdNode, b: KfdNode) -> KfdLink | None:
    # rocm_smi looks at p2p_links before io_links; a direct XGMI link may sit in either.
    for link in a.p2p_links + a.io_links:
        if link.node_to == b.node and link.type == IOLINK_XGMI:
            return link
    return None


def pair_link(a_index: int, b_index: int, a: KfdNode, b: KfdNode, by_node: dict[int, KfdNode]) -> Link:
    """The :class:`Link` between two GPU nodes per rocm_smi's rules (see the module doc)."""
    lo, hi = (a_index, b_index) if a_index < b_index else (b_index, a_index)
    direct = _direct(a, b)
    if direct is not None:
        return Link(lo, hi, LinkType.XGMI, hops=1, weight=direct.weight, max_bandwidth_mbs=direct.max_bandwidth or None)
    cpu_nodes = {n.node for n in by_node.values() if not n.is_gpu}
    la, lb = _cpu_link(a, cpu_nodes), _cpu_link(b, cpu_nodes)
    if la is None or lb is None:
        return Link(lo, hi, LinkType.PCIE if (la or lb) else LinkType.UNKNOWN)
    weight = la.weight + lb.weight
    if la.node_to == lb.node_to:
        return Link(lo, hi, LinkType.PCIE, hops=2, weight=weight)
    cpu_a = by_node.get(la.node_to)
    cross = None if cpu_a is None else next((x for x in cpu_a.io_links if x.node_to == lb.node_to), None)
    if cross is None:
        return Link(lo, hi, LinkType.PCIE, hops=4, weight=weight + _NO_CPU_LINK_PENALTY)
    return Link(lo, hi, LinkType.PCIE, hops=3, weight=weight + cross.weight)


def cpu_node_of(node: KfdNode, by_node: dict[int, KfdNode]) -> int | None:
    """KFD index of the nearest CPU node of a GPU node (``None`` when it has no CPU link)."""
    link = _cpu_link(node, {n.node for n in by_node.values() if not n.is_gpu})
    return None if link is None else link.node_to
