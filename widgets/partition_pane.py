"""GPUs grouped with their compute partitions (MI300-class DPX/QPX/CPX): what HIP/vLLM see under each GPU.

:class:`PartitionPane` is a stand-alone table of every GPU, its modes, and under it each partition's HIP index,
render node, KFD node, NUMA node, memory, CUs, VRAM held and TP worker/rank. (The GPU pane's partition rows are the
view model's: ``tui.viewmodel.gpus.partition_rows``.)

Workers on a partitioned node name their devices by HIP index, so owners are looked up by HIP index.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from amdtop.hip_devices import hip_devices
from amdtop.model import GpuInfo, GpuSample, NodeSnapshot, Partition
from widgets.render_pane import RenderPane

GIB = 1024**3


def mode_text(info: GpuInfo) -> str:
    """``CPX/NPS4``, ``SPX``, ``-/NPS1`` or ``""`` when the GPU has no partition modes."""
    if info.compute_partition is None and info.memory_partition is None:
        return ""
    if info.memory_partition is None:
        return info.compute_partition or ""
    return f"{info.compute_partition or '-'}/{info.memory_partition}"


def partition_vram(sample: GpuSample | None, part: int) -> int | None:
    """VRAM the processes hold on partition ``part`` (``None`` when no process reported a size)."""
    if sample is None:
        return None
    sizes = [p.vram_bytes for p in sample.processes if p.partition == part and p.vram_bytes is not None]
    return sum(sizes) if sizes else None


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.1f}G"


def _vram_cell(used: int | None, total: int | None) -> Text:
    if total is None:
        return Text(_gib(used), style="dim" if used is None else "")
    return Text(f"{_gib(used) if used is not None else '0.0G'}/{total / GIB:.0f}G", style="magenta")


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What the partition pane draws: one snapshot and the HIP-index owners."""

    snapshot: NodeSnapshot
    owners: tuple[tuple[int, str, int], ...] = ()
    """(HIP index, worker, rank)."""


def partition_view(snapshot: NodeSnapshot, owners: Iterable[tuple[int, str, int]] = ()) -> PartitionView:
    """Build the pane's view from a snapshot and the frame's HIP-device owners (``NodeFrame.hip_owners``)."""
    return PartitionView(snapshot, tuple(sorted(owners)))


def _hip_range(info: GpuInfo) -> str:
    """``8-15`` for a GPU whose partitions are HIP devices 8..15."""
    hips = sorted(p.hip_index for p in info.partitions if p.hip_index is not None)
    if not hips:
        return "-"
    return str(hips[0]) if len(hips) == 1 else f"{hips[0]}-{hips[-1]}"


def _render(minor: int | None) -> str:
    return "-" if minor is None else f"renderD{minor}"


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _part_row(
    info: GpuInfo, part: Partition, sample: GpuSample | None, owners: Mapping[int, tuple[str, int]]
) -> list[Any]:
    own = owners.get(part.hip_index) if part.hip_index is not None else None
    return [
        Text(f"  .{part.index}", style="cyan"),
        "",
        _opt(part.hip_index),
        _render(part.render_minor),
        _opt(part.kfd_node),
        _opt(part.numa_node),
        _opt(part.compute_units),
        _vram_cell(partition_vram(sample, part.index), part.mem_bytes),
        Text(f"{own[0]}/r{own[1]}", style="bold") if own else Text("-", style="dim"),
    ]


def render_partitions(view: PartitionView) -> RenderableType:
    """The GPU list grouped by GPU with its partitions."""
    topo = view.snapshot.topology
    if not topo.gpus:
        return Text("No GPUs in the topology.", style="dim")
    owners = {h: (n, r) for h, n, r in view.owners}
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for title, justify in (
        ("GPU", "left"),
        ("Mode", "left"),
        ("HIP", "right"),
        ("Render", "left"),
        ("KFD", "right"),
        ("NUMA", "right"),
        ("CUs", "right"),
        ("VRAM", "right"),
        ("Worker/rank", "left"),
    ):
        table.add_column(title, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    whole = {d.gpu: d.hip_index for d in hip_devices(topo) if d.partition is None}
    partitioned = 0
    for info in topo.gpus:
        sample = view.snapshot.sample(info.index)
        lost = sample is None or sample.lost
        label = Text(f"GPU{info.index}", style="bold red" if lost else "bold")
        count = f" {len(info.partitions)}p" if info.partitions else ""
        hip = whole.get(info.index)
        if not info.partitions:
            own = owners.get(hip) if hip is not None else None
            worker: Text = Text(f"{own[0]}/r{own[1]}", style="bold") if own else Text("-", style="dim")
        else:
            worker = Text("")
            partitioned += 1
        used = None if sample is None else sample.vram_used_bytes
        table.add_row(
            label,
            Text(mode_text(info) + count, style="yellow" if info.partitions else ""),
            _hip_range(info) if info.partitions else _opt(hip),
            "",
            "",
            _opt(info.numa_node),
            "",
            _vram_cell(used, info.vram_total_bytes),
            worker,
        )
        for part in info.partitions:
            table.add_row(*_part_row(info, part, sample, owners))
    devices = sum(max(1, len(g.partitions)) for g in topo.gpus)
    summary = Text(
        f"{len(topo.gpus)} GPUs, {partitioned} partitioned, {devices} HIP devices",
        style="italic",
    )
    return Group(table, summary)


class PartitionPane(RenderPane):
    """Assign a :class:`PartitionView` to ``view``."""

    def render_view(self, view: Any) -> RenderableType:
        if not isinstance(view, PartitionView):
            return "waiting for the first poll…"
        return render_partitions(view)
