"""Issue 23 item 15: on a partitioned node the GPU pane folds idle partitions into one line per GPU, so the TP
groups, NUMA, Workers and Logs panes stay on a 200x50 screen (the snapshot is test_partition_snapshots'
test_cpx_dashboard)."""

from __future__ import annotations

from amdtop.model import WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame
from amdtop.pipeline.owners import device_owners
from amdtop.telemetry.sim import SimBackend
from tests.tui.conftest import make_app, settle
from tui.viewmodel.gpus import idle_note, partition_rows
from widgets.gpu_table import GpuTable


def test_idle_partitions_fold_into_one_row() -> None:
    snap = SimBackend(seed=7, partition="CPX").sample()
    workers = [WorkerStatus("a", WorkerState.READY, (0, 1, 2)), WorkerStatus("b", WorkerState.READY, (9,))]
    owners = NodeFrame(snap, hip_owners=device_owners(workers)).owners_by_hip()
    gpu0, gpu1, gpu2 = snap.topology.gpus[:3]
    rows0 = partition_rows(gpu0, snap.sample(0), owners)
    assert list(rows0) == ["gpu-0.p0", "gpu-0.p1", "gpu-0.p2", "gpu-0.idle"]
    assert str(rows0["gpu-0.idle"][0]).strip() == "└ 5 idle h3-7"
    assert str(rows0["gpu-0.idle"][2]) == "0.0G/120G"  # five 24 GB partitions
    assert list(partition_rows(gpu1, snap.sample(1), owners)) == ["gpu-1.p1", "gpu-1.idle"]
    assert partition_rows(gpu2, snap.sample(2), owners) == {}  # a wholly idle GPU: its own row says so
    assert idle_note(gpu2, snap.sample(2), owners) == "8p idle h16-23"
    assert idle_note(gpu0, snap.sample(0), owners) is None


async def test_cpx_demo_keeps_every_pane_on_a_200x50_screen() -> None:
    app = make_app("mi300x-8-cpx")
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(6)
        await settle(pilot)
        screen = app.dashboard
        assert screen.query_one("#pane-gpus", GpuTable).row_count == 8 + 7 + 1  # GPUs, busy partitions, idle fold
        for pane in ("#pane-groups", "#pane-numa", "#pane-workers", "#pane-logs"):
            region = screen.query_one(pane).content_region
            assert region.height >= 2 and region.bottom <= 49, (pane, region)
