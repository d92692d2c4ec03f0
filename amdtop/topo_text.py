"""The text topology matrix, in the shape users know from ``nvidia-smi topo -m`` and ``rocm-smi --showtopo``."""

from __future__ import annotations

from amdtop.cpulist import format_cpulist
from amdtop.hip_devices import is_partitioned, partition_lines
from amdtop.model import LinkType, Topology


def link_cell(topology: Topology, a: int, b: int) -> str:
    """The matrix cell for the pair: ``X`` on the diagonal, else type plus hops/weight or link count."""
    if a == b:
        return "X"
    link = topology.link(a, b)
    if link is None:
        return "N/A"
    if link.type is LinkType.NVLINK:
        return f"NV{link.nvlinks}" if link.nvlinks else "NVLINK"
    if link.type is LinkType.XGMI:
        return "XGMI" if link.hops in (None, 1) else f"XGMI{link.hops}"
    if link.type is LinkType.PCIE:
        if link.hops == 2:
            return "PCIE-NODE"
        if link.hops is not None and link.hops >= 3:
            return "PCIE-SYS"
        return "PCIE"
    return "UNKNOWN"


LEGEND = """Legend:
  X          = self
  XGMI       = AMD Infinity Fabric, direct (1 hop); XGMIn = n XGMI hops
  NV#        = NVLink, # links
  PCIE-NODE  = PCIe through the host bridge of one NUMA node (hops 2)
  PCIE-SYS   = PCIe across NUMA nodes / sockets (hops 3+)
  PCIE       = PCIe, path unknown"""


def render_topology(topology: Topology, *, legend: bool = True) -> str:
    """Render the GPU x GPU matrix, then weight/hops matrices and NUMA/CPU affinity columns."""
    if not topology.gpus:
        return "No GPUs found.\n"
    idx = [g.index for g in topology.gpus]
    cell_w = max(10, *(len(link_cell(topology, a, b)) + 1 for a in idx for b in idx))
    header = " " * 7 + "".join(f"{'GPU' + str(i):<{cell_w}}" for i in idx)
    header += f"{'NUMA':<6}{'CPU Affinity':<20}"
    lines = [header.rstrip()]
    for gpu in topology.gpus:
        row = f"{'GPU' + str(gpu.index):<7}"
        row += "".join(f"{link_cell(topology, gpu.index, b):<{cell_w}}" for b in idx)
        numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        row += f"{numa:<6}{format_cpulist(gpu.cpu_affinity) or 'N/A':<20}"
        lines.append(row.rstrip())
    for title, attr in (("Weight", "weight"), ("Hops", "hops")):
        if not any(getattr(link, attr) is not None for link in topology.links):
            continue  # NVML has no weights: a matrix of N/A tells nothing
        lines.append("")
        lines.append(f"{title} between two GPUs")
        lines.append((" " * 7 + "".join(f"{'GPU' + str(i):<7}" for i in idx)).rstrip())
        for a in idx:
            cells = []
            for b in idx:
                if a == b:
                    cells.append("0")
                    continue
                link = topology.link(a, b)
                value = None if link is None else getattr(link, attr)
                cells.append("N/A" if value is None else str(value))
            lines.append((f"{'GPU' + str(a):<7}" + "".join(f"{c:<7}" for c in cells)).rstrip())
    lines.append("")
    lines.append("Host NUMA nodes")
    for node in topology.numa_nodes:
        local = [str(g.index) for g in topology.gpus if g.numa_node == node.id]
        lines.append(f"  node {node.id}: CPUs {format_cpulist(node.cpus) or '-'}; GPUs {','.join(local) or '-'}")
    if is_partitioned(topology):
        lines += ["", *partition_lines(topology)]
    if legend:
        lines.append("")
        lines.append(LEGEND)
    return "\n".join(lines) + "\n"
