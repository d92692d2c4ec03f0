"""Frame -> what each pane draws. Pure functions so the panes stay dumb and the views testable."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from amdtop.audit.rules_numa import LOCALITY_WARN_PCT
from amdtop.cpulist import format_cpulist
from amdtop.model import FlagKind, GpuSample, WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame
from widgets.partition_pane import idle_note, partition_rows
from widgets.topo_matrix import TopoView

SPARK = "▁▂▃▄▅▆▇█"
GIB = 1024**3
STATE_STYLE = {
    WorkerState.READY: "green",
    WorkerState.STARTING: "yellow",
    WorkerState.STOPPING: "yellow",
    WorkerState.STOPPED: "dim",
    WorkerState.CRASHED: "bold red",
    WorkerState.ASLEEP: "cyan",
}


def sparkline(values: Sequence[float | None], width: int = 12) -> str:
    tail = values[-width:]
    chars = "".join(" " if v is None else SPARK[max(0, min(7, int(v / 100.0 * 7.999)))] for v in tail)
    return chars.rjust(width)


def bar(frac: float, width: int = 8) -> str:
    full = round(max(0.0, min(1.0, frac)) * width)
    return "█" * full + "░" * (width - full)


def util_style(util: float) -> str:
    return "bold red" if util >= 90 else "yellow" if util >= 60 else "green" if util >= 5 else "dim"


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
        FlagKind.GPU_FAULT: "FAULT",
        FlagKind.NCCL_INIT_STALLED: "INIT",
        FlagKind.NCCL_INIT_INCOMPLETE: "INIT",
        FlagKind.WORKER_STALLED: "STALL",
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
    owner = frame.owners_by_gpu()
    hip_owners = frame.owners_by_hip()
    marks = _gpu_flags(frame)
    rows: dict[str, tuple[object, ...]] = {}
    for info in snap.topology.gpus:
        s: GpuSample | None = snap.sample(info.index)
        numa = "-" if info.numa_node is None else str(info.numa_node)
        gpu = Text(f"{info.index} n{numa}", style="bold")
        own = owner.get(info.index)
        worker = f"{own[0]}/r{own[1]}" if own else (idle_note(info, s, hip_owners) or "-")
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
                Text(f"  ! GPU {','.join(map(str, g.lost_gpus))} lost: the group cannot make progress", style="bold red")
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
            style = "bold red" if f.kind in (FlagKind.GPU_LOST, FlagKind.ECC_UNCORRECTABLE, FlagKind.GPU_FAULT) else "yellow"
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


def _state_cell(w: WorkerStatus, stalled: dict[str, object], state: str) -> Text:
    """The state (``state``: its text), or ``stalled r1`` while ``worker_stalled`` names the worker (and the rank)."""
    if w.name in stalled:
        rank = stalled[w.name]
        return Text("stalled" if rank is None else f"stalled r{rank}", style="bold white on red")
    return Text(state, style=STATE_STYLE.get(w.state, ""))


def worker_key(row_key: str) -> str:
    """The worker a Workers row belongs to: ``w-NAME`` or one of its engine rows ``e-NAME/ENGINE``."""
    if row_key.startswith("e-"):
        return row_key[2:].rpartition("/")[0]
    return row_key.removeprefix("w-")


def _kv(value: float | None) -> str:
    return _num(value * 100 if value is not None else None, "{:.0f}%")


def _engine_rows(w: WorkerStatus) -> dict[str, tuple[object, ...]]:
    # One row per engine (DP replica): its own requests and KV, never summed; informational, not a TP verdict.
    rows: dict[str, tuple[object, ...]] = {}
    engines = w.engine.engines if w.engine else ()
    groups = {str(g.dp_rank): g for g in w.tp_groups()}
    for e in engines:
        group = groups.get(e.engine)
        asleep = bool(e.sleep_level)
        rows[f"e-{w.name}/{e.engine}"] = (
            Text(f"  └ engine {e.engine}", style="dim"),
            Text(f"asleep L{e.sleep_level}" if asleep else "engine", style="cyan" if asleep else "dim"),
            ",".join(map(str, group.gpus)) if group else "-",
            "",
            "",
            "",
            _num(e.running),
            _num(e.waiting),
            _kv(e.kv_cache_usage),
            _num(e.gen_tokens_per_s),
            f"dp{e.engine}",
            "",
        )
    return rows


def worker_rows(
    frame: NodeFrame, now: float, expanded: frozenset[str] | set[str] = frozenset()
) -> dict[str, tuple[object, ...]]:
    """One row per worker; a worker in ``expanded`` is followed by one row per engine."""
    rows: dict[str, tuple[object, ...]] = {}
    stalled = {f.worker: dict(f.extra).get("rank") for f in frame.flags_of(FlagKind.WORKER_STALLED) if f.worker}
    for w in frame.workers:
        e = w.engine
        many = bool(e and len(e.engines) > 1)
        mark = ("▾ " if w.name in expanded else "▸ ") if many else ""
        state = w.state.value if w.state is not WorkerState.ASLEEP or e is None else f"asleep L{e.sleep_level}"
        layout = f" {w.layout.summary()}" if w.layout is not None and not w.layout.is_plain else ""
        name = Text(mark + w.name, style="bold")
        if w.engine_kind != "vllm":
            name.append(f" {w.engine_kind}", style="magenta")  # vLLM is the default engine: only the other is named
        rows[f"w-{w.name}"] = (
            name,
            _state_cell(w, stalled, state),
            (",".join(map(str, w.gpus)) or "-") + layout,
            "-" if w.port is None else str(w.port),
            "-" if w.started_at is None or w.state is WorkerState.STOPPED else _uptime(now - w.started_at),
            str(w.restarts),
            _num(e.running if e else None),
            _num(e.waiting if e else None),
            _kv(e.kv_cache_usage if e else None),
            _num(e.gen_tokens_per_s if e else None),
            w.source,
            Text(f"✗ {w.error_line}", style="red")
            if w.state is WorkerState.CRASHED and w.error_line
            else Text(w.log_note, style="dim")  # a found server: where its log is, or why it cannot be read
            if w.log is None and w.log_note
            else "",
        )
        if w.name in expanded:
            rows.update(_engine_rows(w))
    return rows
