"""CPU the dashboard spends per frame in-process, headless: the real NVML backend answered by a recorded capture
(default the H200's, tests/fixtures/nvml/h200_replay.json), frames published by stepping the node as the Pilot tests
do, each drawn before the next (``pilot.pause()``). The terminal is Textual's headless one, so this is the Python side
of a frame (the view, the panes, the compositor), without the pty and the scheduler noise of ``bench/tui_cpu.py``.

Compare two trees in one sitting, interleaved (the tree is whatever ``PYTHONPATH`` names first):

    for i in 1 2 3 4 5; do for t in /tmp/old $PWD; do
        PYTHONPATH=$t .venv/bin/python bench/dashboard_frames.py --frames 300 --label $t; done; done

``--loop`` replays a busy capture's polls round and round, so its values move in every frame measured (a capture
of 11 polls otherwise holds its last values after the warm-up, an idle GPU's frames).

Prints one JSON line: CPU microseconds per frame (process time over ``--frames`` frames after ``--warmup``):
``tick_us`` is ``app.step()``, which is the node's tick (the backend, the pipeline: ``node_us``) and the dashboard's
apply of the frame (the view model, the panes, the layout: ``apply_us``; ``step`` calls ``_show`` synchronously);
``draw_us`` is what ``pilot.pause()`` then runs (the messages handled, the compositor, the render). The UI's share of a
frame is ``apply_us + draw_us``; ``node_us`` is the same code in both trees. (Before session 23 the header called
``tick_us`` the node alone: the apply, with its layout pass, was in it.)
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


async def measure(fixture_path: Path, frames: int, warmup: int, loop: bool = False) -> dict[str, float]:
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
        node = apply = draw = 0.0
        for _ in range(frames):
            # app.step() in two parts, timed apart: the node's tick, then the dashboard's apply of its frame.
            t0 = time.process_time()
            app.node.pipeline.request_workers()
            frame = app.node.runtime.tick()
            t1 = time.process_time()
            app._show(frame)
            t2 = time.process_time()
            await pilot.pause()
            node += t1 - t0
            apply += t2 - t1
            draw += time.process_time() - t2
    per = 1e6 / frames
    return {"tick_us": (node + apply) * per, "draw_us": draw * per, "node_us": node * per, "apply_us": apply * per}


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
    times = asyncio.run(measure(a.fixture, a.frames, a.warmup, a.loop))
    print(json.dumps({"label": a.label, **{key: round(us, 1) for key, us in times.items()}, "frames": a.frames}))


if __name__ == "__main__":
    main()
