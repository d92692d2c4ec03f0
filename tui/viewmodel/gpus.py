"""Frame -> the GPU pane's rows: one per GPU with its flags, and under a partitioned GPU its partitions (MI300-class
DPX/QPX/CPX: what HIP and vLLM see). Pure: no Textual."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.text import Text

from amdtop.model import FlagKind, GpuInfo, GpuSample, Partition
from amdtop.pipeline import NodeFrame
from amdtop.thresholds import HISTORY_POINTS

SPARK = "▁▂▃▄▅▆▇█"
GIB = 1024**3


def sparkline(values: Sequence[float | None], width: int = HISTORY_POINTS) -> str:
    # As wide as the frame's history: the frame carries what this reads, no more.
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


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.1f}G"


def _vram_cell(used: int | None, total: int | None) -> Text:
    if total is None:
        return Text(_gib(used), style="dim" if used is None else "")
    return Text(f"{_gib(used) if used is not None else '0.0G'}/{total / GIB:.0f}G", style="magenta")


def partition_vram(sample: GpuSample | None, part: int) -> int | None:
    """VRAM the processes hold on partition ``part`` (``None`` when no process reported a size)."""
    if sample is None:
        return None
    sizes = [p.vram_bytes for p in sample.processes if p.partition == part and p.vram_bytes is not None]
    return sum(sizes) if sizes else None


def _span(values: list[int]) -> str:
    """``2-7`` for a run, ``0,2,5`` otherwise."""
    if not values:
        return "?"
    if values == list(range(values[0], values[-1] + 1)):
        return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"
    return ",".join(str(v) for v in values)


def partition_rows(
    info: GpuInfo, sample: GpuSample | None, owners: Mapping[int, tuple[str, int]]
) -> dict[str, tuple[object, ...]]:
    """GPU-table rows for the partitions of ``info`` (empty for an unpartitioned GPU).

    A partition a worker runs on, or where a process holds memory, gets its own row (keyed ``gpu-<i>.p<k>``); the
    idle ones fold into one row (``gpu-<i>.idle``), or into none when the whole GPU is idle (its own row carries
    :func:`idle_note`): a CPX node would otherwise give 72 rows and push the TP groups, NUMA, Workers and Logs panes
    off a 200x50 screen, for partitions that have nothing to show.

    Cells follow ``GpuTable.COLUMNS`` (gpu, util, vram, power, temp, worker, flags, hist); utilisation, power and
    temperature are per physical GPU, so a partition row leaves them blank.
    """
    busy: list[tuple[str, Text, Text, str]] = []
    idle: list[Partition] = []
    for part in info.partitions:
        own = owners.get(part.hip_index) if part.hip_index is not None else None
        used = partition_vram(sample, part.index)
        if own is None and not used:
            idle.append(part)
            continue
        hip = "?" if part.hip_index is None else str(part.hip_index)
        busy.append(
            (
                f"gpu-{info.index}.p{part.index}",
                Text(f".{part.index} h{hip}", style="cyan"),
                _vram_cell(used, part.mem_bytes),
                f"{own[0]}/r{own[1]}" if own else "-",
            )
        )
    if idle and not busy:
        return {}  # every partition idle: the GPU's own row says so (see :func:`idle_note`), no extra line
    if idle:
        hips = sorted(p.hip_index for p in idle if p.hip_index is not None)
        mems = [p.mem_bytes for p in idle]
        total = sum(m for m in mems if m is not None) if all(m is not None for m in mems) else None
        label = f" {len(idle)} idle h{_span(hips)}"
        busy.append((f"gpu-{info.index}.idle", Text(label, style="dim cyan"), _vram_cell(None, total), "-"))
    rows: dict[str, tuple[object, ...]] = {}
    for k, (key, head, vram, worker) in enumerate(busy):
        branch = "└" if k == len(busy) - 1 else "├"
        rows[key] = (Text.assemble(f" {branch}", head), "", vram, "", "", worker, "", "")
    return rows


def idle_note(info: GpuInfo, sample: GpuSample | None, owners: Mapping[int, tuple[str, int]]) -> str | None:
    """``8p idle h8-15`` for a partitioned GPU none of whose partitions is in use; ``None`` otherwise."""
    if not info.partitions or partition_rows(info, sample, owners):
        return None
    hips = sorted(p.hip_index for p in info.partitions if p.hip_index is not None)
    return f"{len(info.partitions)}p idle h{_span(hips)}"
