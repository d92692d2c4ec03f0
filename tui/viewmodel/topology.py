"""Frame -> the Topology, TP groups and NUMA panes: the matrix's view value and the text panes' lines. Pure: no
Textual."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from amdtop.cpulist import format_cpulist
from amdtop.health.throttle import ThrottleShare
from amdtop.health.traffic import FabricTraffic, GroupTraffic
from amdtop.model import FlagKind, NodeSnapshot, Topology, WorkerState
from amdtop.pipeline import NodeFrame
from amdtop.thresholds import LOCALITY_WARN_PCT
from tui.viewmodel.gpus import util_style


@dataclass(frozen=True, slots=True)
class TopoView:
    """What the topology pane draws (``widgets.topo_matrix.TopoSlice`` names the fields it reads)."""

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


def topo_view(frame: NodeFrame, show_gbps: bool, show_traffic: bool = False) -> TopoView:
    warned = {(f.worker, f.gpus) for f in frame.flags_of(FlagKind.TP_PLACEMENT)}
    groups = tuple((g.worker, g.gpus, (g.worker, g.gpus) in warned) for g in frame.groups if len(g.gpus) > 1)
    lost = tuple(s.index for s in frame.snapshot.gpus if s.lost)
    bandwidth = tuple((bw.a, bw.b, bw.gbps) for bw in frame.bandwidth) or None
    return TopoView(
        frame.snapshot.topology,
        groups,
        lost,
        bandwidth,
        show_gbps and bandwidth is not None and not show_traffic,
        # Only the traffic view carries the per-tick values: the link view stays equal from tick to tick, so the pane
        # is not redrawn (a redraw of the matrix is ~1 KB on the terminal).
        frame.fabric if show_traffic else None,
        show_traffic,
        frame.snapshot if show_traffic else None,
        frame.throttle if show_traffic else (),
        tuple((g.worker, g.traffic) for g in frame.groups) if show_traffic else (),
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _flag_group(flag_gpus: tuple[int, ...], groups: tuple[tuple[int, ...], ...]) -> int:
    """Index of the TP group a flag belongs to: the one holding all its GPUs, else the first."""
    return next((i for i, g in enumerate(groups) if flag_gpus and set(flag_gpus) <= set(g)), 0)


def groups_view(frame: NodeFrame) -> tuple[Text, ...]:
    lines: list[Text] = []
    for g in frame.groups:
        devices = g.devices or g.gpus
        where = f"GPUs {','.join(map(str, g.gpus))}"
        if devices != g.gpus:  # partitions: the HIP devices the worker names, then the GPUs they sit on
            where = f"HIP {','.join(map(str, devices))} on {where}"
        mean = g.util_mean_pct
        head = Text.assemble(
            (g.label, "bold"),
            f"  TP{len(devices)} {where}  ",
            ("util " + ("N/A" if mean is None else f"{mean:.0f}%"), util_style(mean or 0)),
            f"  spread over {g.window_s:g}s: util {_pct(g.util_spread_pct)} vram {_pct(g.vram_spread_pct)}  ",
        )
        if g.imbalanced:
            head.append("IMBALANCED", style="bold white on red")
        elif len(g.gpus) > 1:
            head.append("balanced", style="green")
        lines.append(head)
        for f in frame.flags_for_worker(g.worker):
            if f.kind in (FlagKind.NUMA_MISMATCH,):
                continue  # the NUMA pane shows these beside the binding
            if g.dp_rank is not None:
                siblings = tuple(x.gpus for x in frame.groups_of(g.worker))
                if siblings[_flag_group(f.gpus, siblings)] != g.gpus:
                    continue  # a DP replica shows its own flags; worker-wide ones under its first group
            red = (FlagKind.TP_IMBALANCE, FlagKind.NCCL_ERROR, FlagKind.NCCL_TIMEOUT, FlagKind.GPU_FAULT)
            style = "red" if f.kind in red else "yellow"
            style = "bold red" if f.kind is FlagKind.WORKER_STALLED else style
            lines.append(Text(f"  ! {f.kind.value}: {f.message}", style=style))
        if g.lost_gpus:
            lines.append(
                Text(
                    f"  ! GPU {','.join(map(str, g.lost_gpus))} lost: the group cannot make progress", style="bold red"
                )
            )
    # A stalled worker without GPUs (a CPU worker) has no TP group above: its flag still belongs here.
    for f in frame.flags_of(FlagKind.WORKER_STALLED):
        if f.worker is not None and frame.group(f.worker) is None:
            lines.append(Text(f"! worker_stalled: {f.message}", style="bold red"))
    if not lines:
        lines.append(Text("No TP groups: no worker is running.", style="dim"))
    # Flags of the node or of single GPUs (throttling, ECC, lost GPUs, degraded links): under the groups, with their
    # messages; the GPU pane tags the GPUs they name.
    for f in frame.flags:
        if f.worker is None and f.kind is not FlagKind.NUMA_BALANCING:
            style = (
                "bold red"
                if f.kind in (FlagKind.GPU_LOST, FlagKind.ECC_UNCORRECTABLE, FlagKind.GPU_FAULT)
                else "yellow"
            )
            lines.append(Text(f"! {f.kind.value}: {f.message}", style=style))
    return tuple(lines)


def numa_view(frame: NodeFrame) -> tuple[Text, ...]:
    topo = frame.snapshot.topology
    lines: list[Text] = []
    for node in topo.numa_nodes:
        gpus = [g.index for g in topo.gpus if g.numa_node == node.id]
        lines.append(
            Text.assemble(
                (f"node {node.id}", "bold"),
                f"  CPUs {format_cpulist(node.cpus) or '-'}  GPUs {','.join(map(str, gpus)) or '-'}",
            )
        )
    mismatches = {f.worker: f for f in frame.flags if f.kind is FlagKind.NUMA_MISMATCH}
    for w in frame.workers:
        if w.state is WorkerState.STOPPED:
            continue
        b = frame.binding_of(w.name)
        cpus = format_cpulist(b.cpus) if b else ""
        mems = format_cpulist(b.mems) if b else ""
        src = "procfs" if b and b.from_procfs else "reported"
        line = Text.assemble((f"{w.name}", "bold"), f"  cpus {cpus or '?'}  mems {mems or '?'}  ({src})  ")
        local = frame.audit.locality_of(w.name) if frame.audit is not None else None
        if local is not None:
            # Measured from numa_maps on the audit's slow cadence: where the memory is, not where it may go.
            line.append(f"local {local:.0f}%  ", style="green" if local >= LOCALITY_WARN_PCT else "bold yellow")
        flag = mismatches.get(w.name)
        if flag is not None:
            line.append("MISMATCH", style="bold white on red")
            lines.append(line)
            lines.append(Text(f"  ! {flag.message}", style="red"))
        elif cpus:
            line.append("ok", style="green")
            lines.append(line)
        else:
            line.append("unknown", style="dim")
            lines.append(line)
    for f in frame.flags:
        if f.kind is FlagKind.NUMA_BALANCING:
            lines.append(Text(f"! {f.message}", style="yellow"))
    return tuple(lines)
