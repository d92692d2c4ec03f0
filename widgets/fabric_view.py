"""Live fabric traffic as a GPU x GPU matrix, and a per-GPU health table (throttling, ECC).

Pure renderers over typed values (no polling here): the topology matrix calls :func:`render_traffic_matrix` in its
traffic mode, and the health pane is :func:`render_health`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from amdtop.health.throttle import LIMIT_REASONS, REASON_TEXT, ThrottleShare
from amdtop.health.traffic import FabricTraffic, GroupTraffic
from amdtop.model import NodeSnapshot, Topology

GB = 1e9


def _gbs(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value / GB:.1f}" if value >= 0.05 * GB else "<0.1"


def _load_style(value: float | None, peak: float | None) -> str:
    if value is None:
        return "dim"
    if value == 0:
        return "dim green"
    if not peak:
        return "green"
    frac = value / peak
    return "bold red" if frac >= 0.8 else "yellow" if frac >= 0.5 else "green"


def render_traffic_matrix(
    topology: Topology,
    traffic: FabricTraffic | None,
    groups: Sequence[tuple[str, tuple[int, ...], bool]] = (),
    group_traffic: Mapping[str, GroupTraffic | None] | None = None,
) -> RenderableType:
    """Cell (row a, column b): what GPU a read from plus wrote to GPU b, GB/s, over the last poll interval.

    Colours compare the cell with the link's peak (driver-reported, both directions); GPUs whose links have no peer
    (gpu_metrics alone) show only their totals. TP groups get one summary line each, from the traffic the frame's
    TP groups carry (``group_traffic``, by worker; the pipeline computed it).
    """
    if not topology.gpus:
        return Text("No GPUs in the topology.", style="dim")
    if traffic is None:
        return Text("fabric traffic: waiting for two polls with link counters (none on this source?)", style="dim")
    group_of = {g: name for name, gpus, _ in groups for g in gpus}
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    table.add_column("GB/s", no_wrap=True)
    for info in topology.gpus:
        table.add_column(f"GPU{info.index}", justify="right", no_wrap=True)
    table.add_column("rx", justify="right")
    table.add_column("tx", justify="right")
    for row in topology.gpus:
        cells: list[Text | str] = [Text(f"GPU{row.index}", style="bold")]
        for col in topology.gpus:
            if row.index == col.index:
                cells.append(Text("X", style="dim"))
                continue
            pair = traffic.pair(row.index, col.index)
            link = topology.link(row.index, col.index)
            peak = link.max_bandwidth_mbs * 1e6 * 2 if link is not None and link.max_bandwidth_mbs else None
            value = None if pair is None else pair.total_bps
            style = _load_style(value, peak)
            ga, gb = group_of.get(row.index), group_of.get(col.index)
            if ga is not None and ga == gb:
                style += " on grey23"
            cells.append(Text(_gbs(value), style=style))
        totals = traffic.gpu(row.index)
        cells.append(_gbs(None if totals is None else totals.read_bps))
        cells.append(_gbs(None if totals is None else totals.write_bps))
        table.add_row(*cells)
    lines: list[RenderableType] = [table]
    for name, gpus, _ in groups:
        g = (group_traffic or {}).get(name)
        if g is None:
            continue
        intra = None if g.intra_read_bps is None else g.intra_read_bps + (g.intra_write_bps or 0.0)
        total = None if g.total_read_bps is None else g.total_read_bps + (g.total_write_bps or 0.0)
        members = ",".join(map(str, gpus))
        lines.append(
            Text.assemble(
                (f"{name}", "bold"),
                f" (GPU {members}): ",
                (f"{_gbs(intra)} GB/s", "green" if intra else "dim"),
                " between its GPUs, ",
                f"{_gbs(total)} GB/s on all their links",
            )
        )
    lines.append(
        Text(
            f"live fabric traffic over the last {traffic.interval_s:.1f} s: row read+write to column;"
            " rx/tx = all links of the row GPU",
            style="italic dim",
        )
    )
    return Group(*lines)


def render_health(snapshot: NodeSnapshot, shares: Sequence[ThrottleShare] = ()) -> RenderableType:
    """One row per GPU: throttle reasons active now, the worst limit's share of the window, ECC counts."""
    by_gpu = {s.gpu: s for s in shares}
    table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
    for name, justify in (("GPU", "left"), ("throttled now", "left"), ("window", "left"), ("ECC ce/ue", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in snapshot.gpus:
        if s.lost:
            table.add_row(Text(f"GPU{s.index}", style="bold red"), Text("lost", style="red"), "", "")
            continue
        now = (
            Text("-", style="dim")
            if s.throttle_active is None
            else Text(
                ", ".join(r for r in s.throttle_active) or "no",
                style="yellow" if set(s.throttle_active) & LIMIT_REASONS else "green",
            )
        )
        share = by_gpu.get(s.index)
        worst = share.worst if share is not None else None
        if share is None:
            window = Text("-", style="dim")
        elif worst is None or worst[1] < 0.005:
            window = Text(f"0 % of {share.window_s:.0f} s", style="green")
        else:
            pct = round(100 * worst[1])
            window = Text(
                f"{REASON_TEXT.get(worst[0], worst[0])} {pct} % of {share.window_s:.0f} s",
                style="bold red" if pct >= 20 else "yellow",
            )
        if s.ecc is None:
            ecc = Text("-", style="dim")
        else:
            ce = sum(e.correctable or 0 for e in s.ecc)
            ue = sum(e.uncorrectable or 0 for e in s.ecc)
            ecc = Text(f"{ce}/{ue}", style="bold red" if ue else "yellow" if ce else "green")
        table.add_row(Text(f"GPU{s.index}", style="bold"), now, window, ecc)
    return table
