"""CPU to draw the history pane once per push, headless: one ``GpuHistory`` (one GPU, six-line strips, as the H200
capture draws it; ``--gpus 8``: one line each) fed a moving sample a push, every line rendered after each push, as
the compositor asks for them when the pane is repainted whole (a resize, a scroll, a layout). The widget's API is the
same across trees, so two trees compare in one sitting (the tree is whatever ``PYTHONPATH`` names first):

    for i in 1 2 3 4 5; do for t in /tmp/old $PWD; do
        PYTHONPATH=$t .venv/bin/python bench/history_draw.py --label $t; done; done

Prints one JSON line: microseconds of process time per push (the push and every line drawn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from textual.app import App, ComposeResult

from amdtop.pipeline.frame import GpuHistory as PipelineHistory
from widgets.gpu_history import GpuHistory


class _One(App[None]):
    def compose(self) -> ComposeResult:
        yield GpuHistory(id="h")


async def measure(gpus: int, pushes: int, warmup: int, size: tuple[int, int]) -> float:
    app = _One()
    async with app.run_test(size=size) as pilot:
        chart = app.query_one(GpuHistory)
        await pilot.pause()
        spent = 0.0
        for step in range(warmup + pushes):
            history = [PipelineHistory(i, (float(step * 7 % 100),), (40.0,), (600.0 + step % 90,)) for i in range(gpus)]
            t0 = time.process_time()
            chart.push(history, 1.0, [700.0] * gpus)
            for y in range(size[1]):
                chart.render_line(y)
            if step >= warmup:
                spent += time.process_time() - t0
    return spent / pushes * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--pushes", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    size = (200, 8 if a.gpus == 1 else a.gpus + 2)
    us = asyncio.run(measure(a.gpus, a.pushes, a.warmup, size))
    print(json.dumps({"label": a.label, "gpus": a.gpus, "us_per_push": round(us, 1), "pushes": a.pushes}))


if __name__ == "__main__":
    main()
