"""Snapshots: live XGMI traffic in the topology matrix (traffic mode) and the health pane with a throttled GPU.

Both come from the simulated node, whose fabric counters follow its TP workers' load and whose GPU 5 is made to
spend 38 % of its time power-capped.
"""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult

from amdtop.health.throttle import throttle_flags, throttle_shares
from amdtop.health.traffic import group_traffic, latest_traffic
from amdtop.model import NodeSnapshot
from amdtop.telemetry.sim import GpuDemand, SimBackend
from tui.viewmodel.topology import TopoView
from widgets.fabric_view import render_health
from widgets.render_pane import RenderPane
from widgets.topo_matrix import TopoMatrix

GROUPS = (("llama-a", (0, 1, 2, 3), False), ("llama-b", (4, 5), False))


def _history() -> list[NodeSnapshot]:
    t = [1_000.0]
    sim = SimBackend(seed=3, clock=lambda: t[0])
    sim.set_demand("llama-a", {i: GpuDemand(0.9, 150 << 30) for i in range(4)})
    sim.set_demand("llama-b", {4: GpuDemand(0.5, 90 << 30), 5: GpuDemand(0.35, 90 << 30)})
    sim.throttle(5, "power_cap", 0.38)
    snaps = []
    for _ in range(11):
        snaps.append(sim.sample())
        t[0] += 1.0
    return snaps


class MatrixApp(App[None]):
    def __init__(self, view: TopoView) -> None:
        super().__init__()
        self._view = view

    def compose(self) -> ComposeResult:
        yield TopoMatrix(id="topo")

    def on_mount(self) -> None:
        self.query_one(TopoMatrix).view = self._view


class HealthApp(App[None]):
    def __init__(self, snaps: list[NodeSnapshot]) -> None:
        super().__init__()
        self._snaps = snaps

    def compose(self) -> ComposeResult:
        yield RenderPane(id="health")

    def on_mount(self) -> None:
        flags = throttle_flags(self._snaps)
        self.query_one(RenderPane).view = (
            render_health(self._snaps[-1], throttle_shares(self._snaps)),
            *(f"! {f.message}" for f in flags),
        )


def test_traffic_follows_the_groups() -> None:
    snaps = _history()
    traffic = latest_traffic(snaps)
    assert traffic is not None
    p = traffic.pair(0, 1)
    assert p is not None and p.total_bps is not None and 23e9 < p.total_bps < 25e9  # 0.9 * 40 GB/s / 3, both ways
    assert [f.message for f in throttle_flags(snaps)] == ["GPU 5 power-capped 38 % of the last 10 s"]


def test_snapshot_live_traffic_matrix(snap_compare: Any) -> None:
    snaps = _history()
    traffic = latest_traffic(snaps)
    assert traffic is not None
    # The TP groups' traffic as the pipeline puts it in the frame (the matrix only formats it).
    per_group = tuple((name, group_traffic(traffic, gpus)) for name, gpus, _ in GROUPS)
    view = TopoView(snaps[-1].topology, groups=GROUPS, traffic=traffic, show_traffic=True, group_traffic=per_group)
    assert snap_compare(MatrixApp(view), terminal_size=(110, 18))


def test_snapshot_throttled_gpu(snap_compare: Any) -> None:
    assert snap_compare(HealthApp(_history()), terminal_size=(90, 14))
