"""Frame -> what each pane draws. Pure functions so the panes stay dumb and the views testable."""

from __future__ import annotations

from rich.text import Text

from amdtop.audit.rules_numa import LOCALITY_WARN_PCT
from amdtop.cpulist import format_cpulist
from amdtop.hip_devices import physical_worker
from amdtop.model import FlagKind, GpuSample, WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame
from widgets.partition_pane import owners_by_hip, partition_rows
from widgets.topo_matrix import TopoView

SPARK = "▁▂▃▄▅▆▇█"
GIB = 1024**3
STATE_STYLE = {
    WorkerState.READY: "green",
    WorkerState.STARTING: "yellow",
    WorkerState.STOPPING: "yellow",
    WorkerState.STOPPED: "dim",
    WorkerState.CRASHED: "bold red",
}


def sparkline(values: tuple[float | None, ...], width: int = 12) -> str:
    tail = values[-width:]
    chars = "".join(" " if v is None else SPARK[max(0, min(7, int(v / 100.0 * 7.999)))] for v in tail)
    return chars.rjust(width)


def bar(frac: float, width: int = 8) -> str:
    full = round(max(0.0, min(1.0, frac)) * width)
    return "█" * full + "░" * (width - full)


def util_style(util: float) -> str:
    return "bold red" if util >= 90 else "yellow" if util >= 60 else "green" if util >= 5 else "dim"


def _owner(workers: tuple[WorkerStatus, ...]) -> dict[int, tuple[str, int]]:
    owner: dict[int, tuple[str, int]] = {}
    for w in workers:
        if w.state in (WorkerState.STOPPED,):
            continue
        for rank, gpu in enumerate(w.gpus):
            owner.setdefault(gpu, (w.name, rank))
    return owner


def _gpu_flags(frame: NodeFrame) -> dict[int, list[str]]:
    marks: dict[int, list[str]] = {}
    short = {
        FlagKind.TP_IMBALANCE: "IMB",
        FlagKind.NUMA_MISMATCH: "NUMA",
        FlagKind.GPU_LOST: "LOST",
        FlagKind.TRANSPORT_FALLBACK: "XPORT",
        FlagKind.NCCL_ERROR: "NCCL",
        FlagKind.NCCL_TIMEOUT: "NCCL",
        FlagKind.LINK_DEGRADED: "LINK",
        FlagKind.GPU_THROTTLED: "THR",
        FlagKind.ECC_UNCORRECTABLE: "ECC",
    }
    for flag in frame.flags:
        tag = short.get(flag.kind)
        if tag is None:
            continue
        for g in flag.gpus:
            if tag not in marks.setdefault(g, []):
                marks[g].append(tag)
    return marks


def gpu_rows(frame: NodeFrame) -> dict[str, tuple[object, ...]]:
    snap = frame.snapshot
    # Workers name HIP devices; on a partitioned node the GPU row shows the group on its physical GPU.
    owner = _owner(tuple(physical_worker(w, snap.topology) for w in frame.workers))
    hip_owners = owners_by_hip(frame.workers)
    marks = _gpu_flags(frame)
    rows: dict[str, tuple[object, ...]] = {}
    for info in snap.topology.gpus:
        s: GpuSample | None = snap.sample(info.index)
        numa = "-" if info.numa_node is None else str(info.numa_node)
        gpu = Text(f"{info.index} n{numa}", style="bold")
        own = owner.get(info.index)
        worker = f"{own[0]}/r{own[1]}" if own else "-"
        flags = Text(" ".join(marks.get(info.index, [])), style="bold red")
        if s is None or s.lost:
            why = "" if s is None else (s.error or "")
            rows[f"gpu-{info.index}"] = (
                Text(f"{info.index} n{numa}", style="bold red"),
                Text("LOST", style="bold red"),
                Text(why[:30], style="red"),
                "-",
                "-",
                worker,
                flags,
                "",
            )
            continue
        util = s.util_pct
        util_t = Text("N/A" if util is None else f"{util:5.1f}%", style=util_style(util or 0.0))
        hist = Text(sparkline(frame.history_of(info.index).util_pct), style=util_style(util or 0.0))
        if s.vram_used_bytes is not None and s.vram_total_bytes:
            frac = s.vram_used_bytes / s.vram_total_bytes
            vram = Text.assemble(
                (bar(frac), "magenta" if frac < 0.95 else "bold red"),
                f" {s.vram_used_bytes / GIB:5.1f}/{s.vram_total_bytes / GIB:.0f}G",
            )
        else:
            vram = Text("N/A", style="dim")
        power = "N/A" if s.power_w is None else f"{s.power_w:4.0f}W"
        temp = "N/A" if s.temp_c is None else f"{s.temp_c:3.0f}°C"
        rows[f"gpu-{info.index}"] = (gpu, util_t, vram, power, temp, worker, flags, hist)
        rows.update(partition_rows(info, s, hip_owners))
    return rows


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
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def groups_view(frame: NodeFrame) -> tuple[Text, ...]:
    lines: list[Text] = []
    for g in frame.groups:
        devices = g.devices or g.gpus
        where = f"GPUs {','.join(map(str, g.gpus))}"
        if devices != g.gpus:  # partitions: the HIP devices the worker names, then the GPUs they sit on
            where = f"HIP {','.join(map(str, devices))} on {where}"
        mean = g.util_mean_pct
        head = Text.assemble(
            (g.worker, "bold"),
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
            style = "red" if f.kind in (FlagKind.TP_IMBALANCE, FlagKind.NCCL_ERROR, FlagKind.NCCL_TIMEOUT) else "yellow"
            lines.append(Text(f"  ! {f.kind.value}: {f.message}", style=style))
        if g.lost_gpus:
            lines.append(
                Text(f"  ! GPU {','.join(map(str, g.lost_gpus))} lost: the group cannot make progress", style="bold red")
            )
    if not lines:
        lines.append(Text("No TP groups: no worker is running.", style="dim"))
    # Flags of the node or of single GPUs (throttling, ECC, lost GPUs, degraded links): under the groups, with their
    # messages; the GPU pane tags the GPUs they name.
    for f in frame.flags:
        if f.worker is None and f.kind is not FlagKind.NUMA_BALANCING:
            style = "bold red" if f.kind in (FlagKind.GPU_LOST, FlagKind.ECC_UNCORRECTABLE) else "yellow"
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


def _uptime(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def worker_rows(frame: NodeFrame, now: float) -> dict[str, tuple[object, ...]]:
    rows: dict[str, tuple[object, ...]] = {}
    for w in frame.workers:
        e = w.engine
        rows[f"w-{w.name}"] = (
            Text(w.name, style="bold"),
            Text(w.state.value, style=STATE_STYLE.get(w.state, "")),
            ",".join(map(str, w.gpus)) or "-",
            "-" if w.port is None else str(w.port),
            "-" if w.started_at is None or w.state is WorkerState.STOPPED else _uptime(now - w.started_at),
            str(w.restarts),
            _num(e.running if e else None),
            _num(e.waiting if e else None),
            _num(e.kv_cache_usage * 100 if e and e.kv_cache_usage is not None else None, "{:.0f}%"),
            _num(e.gen_tokens_per_s if e else None),
            w.source,
        )
    return rows
