"""GPU x GPU topology matrix: link class, hops/weight (or measured GB/s), NUMA node and CPU affinity per GPU."""

from __future__ import annotations

from typing import Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from amdtop.cpulist import format_cpulist
from amdtop.health.throttle import ThrottleShare
from amdtop.health.traffic import FabricTraffic, GroupTraffic
from amdtop.model import GpuInfo, Link, LinkType, NodeSnapshot, Topology
from widgets.fabric_view import render_health, render_traffic_matrix
from widgets.render_pane import RenderPane

SHORT = {LinkType.XGMI: "XG", LinkType.NVLINK: "NV", LinkType.PCIE: "PX", LinkType.UNKNOWN: "??"}


class TopoSlice(Protocol):
    """What the pane draws: the view model's ``TopoView`` (``tui.viewmodel.topology``); widgets never import the app,
    so the pane names the fields it reads."""

    @property
    def topology(self) -> Topology: ...
    @property
    def groups(self) -> tuple[tuple[str, tuple[int, ...], bool], ...]: ...
    @property
    def lost(self) -> tuple[int, ...]: ...
    @property
    def bandwidth(self) -> tuple[tuple[int, int, float], ...] | None: ...
    @property
    def show_gbps(self) -> bool: ...
    @property
    def traffic(self) -> FabricTraffic | None: ...
    @property
    def show_traffic(self) -> bool: ...
    @property
    def snapshot(self) -> NodeSnapshot | None: ...
    @property
    def throttle(self) -> tuple[ThrottleShare, ...]: ...
    @property
    def group_traffic(self) -> tuple[tuple[str, GroupTraffic | None], ...]: ...


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


def link_text(link: Link | None, compact: bool = False, bare: bool = False) -> str:
    """A cell: ``XG 1/15`` (type, hops, weight), ``XG1`` when ``compact``, ``XG`` when ``bare``."""
    if link is None:
        return "-"
    if link.type == LinkType.NVLINK and link.nvlinks:
        return "NV" if bare else f"NV{link.nvlinks}"
    if bare:
        return SHORT[link.type]
    hops = "?" if link.hops is None else str(link.hops)
    if compact:
        return f"{SHORT[link.type]}{hops}"
    weight = "" if link.weight is None else f"/{link.weight}"
    return f"{SHORT[link.type]} {hops}{weight}"


LEVELS = 5
"""How far the matrix abbreviates, widest first: 0 ``GPU0`` headers and ``XG 1/15`` cells; 1 ``XG1`` cells; 2 ``G0``
headers and cells one space apart; 3 no CPU-affinity column (the NUMA pane lists each node's CPUs); 4 ``XG`` cells. Only past
the last does Rich cut cells to ``…``."""
LINK_NAMES = {LinkType.XGMI: "XGMI", LinkType.NVLINK: "NVLink", LinkType.PCIE: "PCIe", LinkType.UNKNOWN: "unknown"}


def _legend(view: TopoSlice, level: int, gbps: bool) -> Text:
    topo = view.topology
    kinds = [t for t in SHORT if any(link.type is t for link in topo.links)]
    parts: list[tuple[str, str] | str] = []
    for kind in kinds:
        style = "green" if kind in (LinkType.XGMI, LinkType.NVLINK) else "yellow"
        parts += [(SHORT[kind], style), f"={LINK_NAMES[kind]} "]
    if kinds and not gbps:
        parts.append("cell: type hops/weight " if level == 0 else "cell: type hops " if level < 4 else "cell: type ")
    if level >= 2:
        parts.append("G0=GPU0 ")
    if level >= 3:
        parts.append("CPUs: 4 NUMA ")
    if view.groups:
        parts += [(" TP group ", "on grey23"), " "]
        if any(flagged for _, _, flagged in view.groups):
            parts.append((" across slow link/NUMA ", "on dark_red"))
    return Text.assemble(*parts)


def matrix_table(view: TopoSlice, level: int) -> Table:
    """The GPU x GPU table at abbreviation ``level`` (see :data:`LEVELS`)."""
    topo = view.topology
    group_of: dict[int, tuple[str, bool]] = {}
    for name, gpus, flagged in view.groups:
        for g in gpus:
            group_of[g] = (name, flagged)
    gbps = {(a, b): v for a, b, v in view.bandwidth or ()} if view.show_gbps else {}
    gpu = "G" if level >= 2 else "GPU"
    table = Table(box=None, padding=(0, 1, 0, 0) if level >= 2 else (0, 1), show_edge=False, header_style="bold")
    table.add_column("", no_wrap=True)
    for info in topo.gpus:
        table.add_column(f"{gpu}{info.index}", justify="center", no_wrap=True)
    partitioned = any(info.partitions for info in topo.gpus)
    if partitioned:
        table.add_column("Mode", no_wrap=True)
        table.add_column("HIP", justify="right", no_wrap=True)
    table.add_column("NUMA" if level < 2 else "N", justify="center", no_wrap=True)
    if level < 3:
        table.add_column("CPU affinity" if level < 2 else "CPUs", no_wrap=True)
    for row in topo.gpus:
        label = Text(f"{gpu}{row.index}", style="bold red" if row.index in view.lost else "bold")
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
            if key in gbps:
                text = f"{gbps[key]:.0f}GB/s" if level < 2 else f"{gbps[key]:.0f}"
            else:
                text = link_text(link, level >= 1, level >= 4)
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
        if level < 3:
            cells.append(format_cpulist(row.cpu_affinity) or "-")
        table.add_row(*cells)
    return table


def render_matrix(view: TopoSlice, level: int) -> RenderableType:
    """The link matrix at ``level`` with its legend (and the partition note on a partitioned node)."""
    topo = view.topology
    gbps = view.show_gbps and bool(view.bandwidth)
    legend = _legend(view, level, gbps)
    if gbps:
        legend.append("[GB/s measured]", style="italic")
    if any(info.partitions for info in topo.gpus):
        devices = sum(max(1, len(g.partitions)) for g in topo.gpus)
        note = Text(
            f"Np = N compute partitions (HIP devices) on the GPU; {devices} HIP devices; "
            "cells: the links between the GPUs' partitions",
            style="dim",
        )
        return Group(matrix_table(view, level), legend, note)
    return Group(matrix_table(view, level), legend) if legend.plain else matrix_table(view, level)


class TopoMatrix(RenderPane):
    """The link matrix, abbreviated as far as the pane's width needs (:data:`LEVELS`) before anything is cut."""

    level = 0
    """The abbreviation level last drawn."""

    def render_at(self, view: Any, width: int) -> RenderableType:
        """What the pane draws for ``view`` at ``width`` cells of content."""
        if view is None:
            return "waiting for the first poll…"
        topo = view.topology
        if not topo.gpus:
            return Text("No GPUs in the topology.", style="dim")
        if view.show_traffic:
            # Live fabric traffic, and beside it what holds the GPUs back (throttling) and their ECC counts.
            traffic = render_traffic_matrix(topo, view.traffic, view.groups, dict(view.group_traffic))
            if view.snapshot is None:
                return traffic
            return Group(traffic, Text(""), render_health(view.snapshot, view.throttle))
        level = next((n for n in range(LEVELS) if self.across(n, view) <= width), LEVELS - 1)
        self.level = level if width else 0
        return render_matrix(view, self.level)

    _widths: tuple[TopoSlice, dict[int, int]] | None = None

    def across(self, level: int, view: TopoSlice | None = None) -> int:
        """Cells the table takes at ``level`` (measured once per view: a measure walks every cell, ~10 ms)."""
        view = view if view is not None else self.view
        if view is None:
            return 0
        if self._widths is None or self._widths[0] != view:
            self._widths = (view, {})
        known = self._widths[1]
        if level not in known:
            console = self.app.console if self.is_attached else Console()
            # Unbounded: the console's own width (80 when not a terminal) would cap the measure.
            options = console.options.update_width(10_000)
            known[level] = Measurement.get(console, options, matrix_table(view, level)).maximum
        return known[level]

    def render_view(self, view: Any) -> RenderableType:
        return self.render_at(view, self.content_size.width)

    def lines_at(self, width: int) -> int:
        """Lines the current view takes at ``width`` cells of content (the layout asks before it places the pane)."""
        key = (self.view, width)
        if self._measured is None or self._measured[0] != key:
            level = self.level
            renderable = self.render_at(self.view, width)
            self.level = level
            console = self.app.console
            lines = console.render_lines(renderable, console.options.update_width(max(1, width)), pad=False)
            self._measured = (key, len(lines))
        return self._measured[1]

    _measured: tuple[tuple[Any, int], int] | None = None

    def on_resize(self) -> None:
        # Cell format depends on the width (abbreviated cells on narrow panes).
        self.update(self.render_view(self.view))
