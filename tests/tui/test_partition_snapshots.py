"""A CPX/NPS4 node on screen: the partition pane (GPUs grouped with their partitions, TP groups by HIP index), the
topology matrix with partition counts, and the whole dashboard on the simulated CPX node (SVGs under snapshots/)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from textual.app import App, ComposeResult
from textual.containers import Horizontal

from amdtop.model import WorkerState, WorkerStatus
from amdtop.pipeline.owners import device_owners
from amdtop.telemetry.sim import SimBackend
from tests.tui.conftest import FROZEN, make_app
from tui.viewmodel.topology import TopoView
from widgets.partition_pane import PartitionPane, partition_view, render_partitions
from widgets.topo_matrix import TopoMatrix

# Two TP groups named by HIP index: TP-8 over GPU 0's partitions, TP-4 across GPUs 3 and 4 (two NUMA nodes).
WORKERS = (
    WorkerStatus("llama-cpx8", WorkerState.READY, tuple(range(8))),
    WorkerStatus("qwen-x", WorkerState.READY, (30, 31, 32, 33)),
)


class PartitionApp(App[None]):
    def __init__(self, partition: str = "CPX/NPS4") -> None:
        super().__init__()
        self.sim = SimBackend(seed=7, clock=lambda: FROZEN, hostname="amdtop-demo", partition=partition)

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield PartitionPane(id="parts")
            yield TopoMatrix(id="topo")

    def on_mount(self) -> None:
        snap = self.sim.sample()
        self.query_one(PartitionPane).view = partition_view(snap, device_owners(WORKERS))
        groups = (("llama-cpx8", (0,), False), ("qwen-x", (3, 4), True))
        self.query_one(TopoMatrix).view = TopoView(snap.topology, groups)


def test_cpx_partition_pane_and_matrix(snap_compare: Any) -> None:
    assert snap_compare(PartitionApp(), terminal_size=(200, 80))


def test_cpx_dashboard(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await pilot.pause()
        pilot.app.step(6)
        await pilot.pause()

    assert snap_compare(make_app("mi300x-8-cpx"), terminal_size=(200, 50), run_before=run_before)


def test_partition_pane_groups_partitions_under_their_gpu() -> None:
    sim = SimBackend(seed=7, clock=lambda: FROZEN, partition="DPX/NPS1")
    console = Console(width=160, record=True)
    console.print(render_partitions(partition_view(sim.sample(), device_owners(WORKERS))))
    lines = console.export_text().splitlines()
    gpu7 = next(k for k, line in enumerate(lines) if line.split()[:1] == ["GPU7"])
    assert "DPX/NPS1 2p" in lines[gpu7] and "14-15" in lines[gpu7]
    assert lines[gpu7 + 2].split()[:3] == [".1", "15", "renderD185"]  # GPU 7 partition 1: HIP 15, 128 + 8*7 + 1
    assert "llama-cpx8/r1" in lines[3]  # HIP 1 = GPU 0 partition 1
    assert "qwen-x" not in console.export_text()  # HIP 30-33 do not exist on a 16-device DPX node
    assert "16 HIP devices" in lines[-1]
