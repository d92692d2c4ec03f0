"""The pipeline's history step (``NodePipeline._record_history``) for 8 GPUs whose series are full (300 points): per
call hot (back to back) and cold (one call a second, as a 1 Hz program pays), on this tree or an earlier one.

    .venv/bin/python bench/record_history.py [COLD_CALLS]
    cd /tmp/old && PYTHONPATH=/tmp/old /work/main/.venv/bin/python -P /work/main/bench/record_history.py   # git archive

Session 20 (docs/benchmarks.md): windows moved on by a point (amdtop/pipeline/series.py) against tuples copied from
deques every tick.
"""

from __future__ import annotations

import statistics
import sys
import time

from amdtop.model import GpuSample, NodeSnapshot, Topology
from amdtop.pipeline.frame import GpuHistory
from amdtop.pipeline.producer import NodePipeline

GPUS = 8


def _snap(t: int) -> NodeSnapshot:
    gpus = tuple(
        GpuSample(
            index=i,
            util_pct=float((t * 7 + i) % 100),
            power_w=float(t % 700) + 0.5,
            vram_used_bytes=(t % 50) << 30,
            vram_total_bytes=192 << 30,
        )
        for i in range(GPUS)
    )
    return NodeSnapshot(timestamp=float(t), hostname="h", backend="sim", topology=Topology((), (), ()), gpus=gpus)


def main() -> int:
    cold_calls = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    # Only the history's own state: the step reads nothing else of the pipeline.
    pipe = NodePipeline.__new__(NodePipeline)
    pipe._history = {}  # type: ignore[attr-defined]
    pipe._history_counts = {}  # type: ignore[attr-defined]
    pipe._history_points = 300  # type: ignore[attr-defined]
    snaps = [_snap(t) for t in range(400)]
    alive: list[tuple[GpuHistory, ...]] = []  # the frames a dashboard holds (the last few), freed as they age

    def step(snap: NodeSnapshot) -> None:
        alive.append(pipe._record_history(snap))
        del alive[:-3]

    for s in snaps[:300]:
        step(s)
    hot = []
    for s in snaps[300:]:
        t = time.perf_counter_ns()
        step(s)
        hot.append(time.perf_counter_ns() - t)
    cold = []
    for k in range(cold_calls):
        time.sleep(1.0)
        t = time.thread_time_ns()
        step(snaps[k])
        cold.append(time.thread_time_ns() - t)
    print(
        f"_record_history, {GPUS} GPUs x 300 points: hot median {statistics.median(hot) / 1e3:.1f} us, "
        f"cold median {statistics.median(cold) / 1e3:.1f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
