"""CPU the dashboard spends per frame in-process, headless: the real NVML backend answered by a recorded capture
(default the H200's, tests/fixtures/nvml/h200_replay.json), frames published by stepping the node as the Pilot tests
do, each drawn before the next (``pilot.pause()``). The terminal is Textual's headless one, so this is the Python side
of a frame (the view, the panes, the compositor), without the pty and the scheduler noise of ``bench/tui_cpu.py``.

Compare two trees in one sitting, interleaved (the tree is whatever ``PYTHONPATH`` names first):

    for i in 1 2 3 4 5; do for t in /tmp/old $PWD; do
        PYTHONPATH=$t .venv/bin/python bench/dashboard_frames.py --frames 300 --label $t; done; done

``--loop`` replays a busy capture's polls round and round, so its values move in every frame measured (a capture
of 11 polls otherwise holds its last values after the warm-up, an idle GPU's frames).

Prints one JSON line: CPU microseconds per frame (process time over ``--frames`` frames after ``--warmup``), split
into the node's tick (``app.step()``: the backend, the pipeline; the same code in both trees) and the draw (the frame
message handled, the view built, the panes and the compositor: what this tree's UI costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from amdtop.model import NodeSnapshot
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize
from tests.tui.conftest import FROZEN, open_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_tui import looped

REPLAY = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "nvml" / "h200_replay.json"


class Stepped(NvmlBackend):
    """The capture's polls one second apart (the history's time axis and the health windows read the timestamps)."""

    _polls = 0

    def sample(self) -> NodeSnapshot:
        self._polls += 1
        return replace(super().sample(), timestamp=FROZEN + self._polls)


async def measure(fixture_path: Path, frames: int, warmup: int, loop: bool = False) -> tuple[float, float]:
    fixture = load_fixture(fixture_path)
    if loop:
        fixture = looped(fixture)
    root = Path(tempfile.mkdtemp(prefix="amdtop-frames-"))
    sysfs, proc = materialize(fixture, root)
    backend = Stepped(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc))
    app = open_app(backend, clock=lambda: FROZEN, proc_root=proc, state_dir=root, autopoll=False, discover=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        for _ in range(warmup):
            app.step()
            await pilot.pause()
        tick = draw = 0.0
        for _ in range(frames):
            t0 = time.process_time()
            app.step()
            t1 = time.process_time()
            await pilot.pause()
            tick += t1 - t0
            draw += time.process_time() - t1
    return tick / frames * 1e6, draw / frames * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixture", type=Path, default=REPLAY)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--loop",
        action="store_true",
        help="replay the capture's polls round and round (a busy capture's values keep moving: bench/replay_tui.py)",
    )
    a = ap.parse_args()
    tick, draw = asyncio.run(measure(a.fixture, a.frames, a.warmup, a.loop))
    print(json.dumps({"label": a.label, "tick_us": round(tick, 1), "draw_us": round(draw, 1), "frames": a.frames}))


if __name__ == "__main__":
    main()
