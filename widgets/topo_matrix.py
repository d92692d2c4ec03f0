"""GPU x GPU topology matrix: link class, hops/weight (or measured GB/s), NUMA node and CPU affinity per GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from amdtop.cpulist import format_cpulist
from amdtop.health.throttle import ThrottleShare
from amdtop.health.traffic import FabricTraffic, GroupTraffic
from amdtop.model import GpuInfo, Link, LinkType, NodeSnapshot, Topology
from widgets.fabric_view import render_health, render_traffic_matrix
from widgets.render_pane import RenderPane

SHORT = {LinkType.XGMI: "XG", LinkType.NVLINK: "NV", LinkType.PCIE: "PX", LinkType.UNKNOWN: "??"}


@dataclass(frozen=True, slots=True)
class TopoView:
    topology: Topology
    groups: tuple[tuple[str, tuple[int, ...], bool], ...] = ()
    """(worker, GPUs, flagged) per TP group; flagged groups span a slow link or two NUMA nodes."""
    lost: tuple[int, ...] = ()
    bandwidth: tuple[tuple[int, int, float], ...] | None = None
    """(a, b, GB/s) measured by the probe; shown instead of link type when ``show_gbps``."""
    show_gbps: bool = False
    traffic: FabricTraffic | None = None
    """Live fabric rates (``amdtop.health.traffic.latest_traffic``); drawn instead of the link classes when
    ``show_traffic``."""
    show_traffic: bool = False
    snapshot: NodeSnapshot | None = None
    """The sample the health table under the traffic matrix reads (throttle reasons now, ECC counts)."""
    throttle: tuple[ThrottleShare, ...] = ()
    """Share of the last window each GPU spent throttled."""
    group_traffic: tuple[tuple[str, GroupTraffic | None], ...] = ()
    """(worker, its group's traffic) as the frame's TP groups carry it (the traffic view's summary lines)."""


def partition_label(info: GpuInfo) -> str:
    """Diagonal cell of a partitioned GPU: how many HIP devices it holds (``8p``); ``X`` otherwise."""
    return f"{len(info.partitions)}p" if info.partitions else "X"


def hip_span(info: GpuInfo) -> str:
    """HIP indices of a GPU's partitions (``8-15``), ``-`` when unknown."""
    hips = sorted(p.hip_index for p in info.partitions if p.hip_index is not None)
    if not hips:
        return "-"
    return str(hips[0]) if len(hips) == 1 else f"{hips[0]}-{hips[-1]}"


def partition_numa(info: GpuInfo) -> str:
    """NUMA column of a GPU: its node, or the nodes KFD links its partitions to when they differ."""
    nodes = sorted({p.numa_node for p in info.partitions if p.numa_node is not None})
    if len(nodes) > 1:
        return ",".join(str(n) for n in nodes)
    return "-" if info.numa_node is None else str(info.numa_node)


def link_style(link: Link | None) -> str:
    if link is None:
        return "dim"
    if link.type in (LinkType.XGMI, LinkType.NVLINK):
        return "green" if link.direct else "cyan"
    if link.type == LinkType.PCIE:
        return "yellow" if (link.hops or 0) <= 2 else "red"
    return "dim"


def link_text(link: Link | None, compact: bool = False) -> str:
    if link is None:
        return "-"
    if link.type == LinkType.NVLINK and link.nvlinks:
        return f"NV{link.nvlinks}"
    hops = "?" if link.hops is None else str(link.hops)
    if compact:
        return f"{SHORT[link.type]}{hops}"
    weight = "" if link.weight is None else f"/{link.weight}"
    return f"{SHORT[link.type]} {hops}{weight}"


class TopoMatrix(RenderPane):
    def render_view(self, view: Any) -> RenderableType:
        if not isinstance(view, TopoView):
            return "waiting for the first poll…"
        topo = view.topology
        if not topo.gpus:
            return Text("No GPUs in the topology.", style="dim")
        if view.show_traffic:
            # Live fabric traffic, and beside it what holds the GPUs back (throttling) and their ECC counts.
            return Group(
                render_traffic_matrix(topo, view.traffic, view.groups, dict(view.group_traffic)), Text(""),
                render_health(view.snapshot, view.throttle),
            ) if view.snapshot is not None else render_traffic_matrix(topo, view.traffic, view.groups, dict(view.group_traffic))
        group_of: dict[int, tuple[str, bool]] = {}
        for name, gpus, flagged in view.groups:
            for g in gpus:
                group_of[g] = (name, flagged)
        gbps = {(a, b): v for a, b, v in view.bandwidth or ()} if view.show_gbps else {}
        # Full cells need ~8 columns per GPU; on a narrow pane drop the weight (the legend says so).
        compact = self.size.width and self.size.width < 9 * len(topo.gpus) + 30
        table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        table.add_column("", no_wrap=True)
        for info in topo.gpus:
            table.add_column(f"GPU{info.index}", justify="center", no_wrap=True)
        partitioned = any(info.partitions for info in topo.gpus)
        if partitioned:
            table.add_column("Mode", no_wrap=True)
            table.add_column("HIP", justify="right", no_wrap=True)
        table.add_column("NUMA", justify="center")
        table.add_column("CPU affinity", no_wrap=True)
        for row in topo.gpus:
            label = Text(f"GPU{row.index}", style="bold red" if row.index in view.lost else "bold")
            cells: list[Text | str] = [label]
            for col in topo.gpus:
                if row.index == col.index:
                    # A TP group over one GPU's partitions shows on its diagonal.
                    own = group_of.get(row.index)
                    diag = "dim" if own is None else ("bold on dark_red" if own[1] else "bold on grey23")
                    cells.append(Text(partition_label(row), style=diag if row.partitions else "dim"))
                    continue
                link = topo.link(row.index, col.index)
                key = (min(row.index, col.index), max(row.index, col.index))
                text = f"{gbps[key]:.0f}GB/s" if key in gbps else link_text(link, bool(compact))
                style = link_style(link)
                ga, gb = group_of.get(row.index), group_of.get(col.index)
                if ga is not None and ga == gb:
                    style += " bold on dark_red" if ga[1] else " bold on grey23"
                cells.append(Text(text, style=style))
            if partitioned:
                mode = "/".join(m for m in (row.compute_partition, row.memory_partition) if m)
                cells.append(Text(mode or "-", style="yellow" if row.partitions else ""))
                cells.append(hip_span(row) if row.partitions else "-")
            cells.append(partition_numa(row) if partitioned else "-" if row.numa_node is None else str(row.numa_node))
            cells.append(format_cpulist(row.cpu_affinity) or "-")
            table.add_row(*cells)
        legend = Text.assemble(
            ("XG", "green"),
            "=XGMI ",
            ("NV", "green"),
            "=NVLink ",
            ("PX", "yellow"),
            "=PCIe  cell: type hops" + ("  " if compact else "/weight  "),
            (" TP group ", "on grey23"),
            " ",
            (" TP group across slow link/NUMA ", "on dark_red"),
        )
        mode = Text("  [GB/s measured]" if view.show_gbps and gbps else "", style="italic")
        if partitioned:
            devices = sum(max(1, len(g.partitions)) for g in topo.gpus)
            note = Text(
                f"Np = N compute partitions (HIP devices) on the GPU; {devices} HIP devices; "
                "cells: the links between the GPUs' partitions",
                style="dim",
            )
            return Group(table, Text.assemble(legend, mode), note)
        return Group(table, Text.assemble(legend, mode))

    def on_resize(self) -> None:
        # Cell format depends on the width (compact cells on narrow panes).
        self.update(self.render_view(self.view))
