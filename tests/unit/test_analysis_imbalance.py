"""ImbalanceTracker: spread over a window, idle groups ignored, one noisy tick does not flap."""

from __future__ import annotations

from amdtop.analysis import ImbalanceTracker, group_spreads
from amdtop.model import FlagKind, GpuSample, NodeSnapshot, Topology, WorkerState, WorkerStatus

TOPO = Topology((), (), ())
WORKER = WorkerStatus("w", WorkerState.READY, (0, 1, 2, 3))


def snap(t: float, utils: list[float], vram: list[int] | None = None) -> NodeSnapshot:
    vram = vram or [100] * len(utils)
    gpus = tuple(
        GpuSample(i, util_pct=u, vram_used_bytes=v, vram_total_bytes=200)
        for i, (u, v) in enumerate(zip(utils, vram, strict=True))
    )
    return NodeSnapshot("test", "h", t, TOPO, gpus)


def test_balanced_group_has_no_flag() -> None:
    tracker = ImbalanceTracker(window_s=5, threshold_pct=15)
    assert tracker.update(snap(0, [80, 82, 79, 81]), [WORKER]) == []


def test_util_spread_above_threshold_is_flagged_with_spread() -> None:
    tracker = ImbalanceTracker(window_s=5, threshold_pct=15)
    flags = tracker.update(snap(0, [80, 80, 80, 40]), [WORKER])
    assert [f.kind for f in flags] == [FlagKind.TP_IMBALANCE]
    assert flags[0].metric == "util_pct" and flags[0].worker == "w" and flags[0].gpus == (0, 1, 2, 3)
    assert abs((flags[0].spread_pct or 0) - 50.0) < 1e-9


def test_vram_spread_is_flagged() -> None:
    tracker = ImbalanceTracker()
    flags = tracker.update(snap(0, [80, 80, 80, 80], [100, 100, 100, 50]), [WORKER])
    assert [f.metric for f in flags] == ["vram_used_bytes"]


def test_one_noisy_tick_inside_window_does_not_flag() -> None:
    tracker = ImbalanceTracker(window_s=5, threshold_pct=15)
    for t in range(5):
        assert tracker.update(snap(t, [80, 80, 80, 80]), [WORKER]) == []
    # GPU 3 dips to 40% once: the window mean is (4*80+40)/5 = 72 -> spread 10% < 15%.
    assert tracker.update(snap(5, [80, 80, 80, 40]), [WORKER]) == []


def test_sustained_imbalance_flags_then_clears_after_window() -> None:
    tracker = ImbalanceTracker(window_s=2, threshold_pct=15)
    flags = []
    for t in range(4):
        flags = tracker.update(snap(t, [80, 80, 80, 40]), [WORKER])
    assert flags
    for t in range(4, 8):
        flags = tracker.update(snap(t, [80, 80, 80, 80]), [WORKER])
    assert flags == []


def test_idle_group_and_single_gpu_worker_are_not_judged() -> None:
    tracker = ImbalanceTracker()
    single = WorkerStatus("one", WorkerState.READY, (0,))
    assert tracker.update(snap(0, [0.2, 1.0, 3.0, 0.0]), [WORKER, single]) == []


def test_lost_gpu_is_left_out_of_the_spread() -> None:
    s = snap(0, [80, 80, 80, 80])
    lost = NodeSnapshot("t", "h", 0, TOPO, (*s.gpus[:3], GpuSample(3, lost=True)))
    spread, means = group_spreads([lost], (0, 1, 2, 3), "util_pct")
    assert spread == 0.0 and set(means) == {0, 1, 2}
