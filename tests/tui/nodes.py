"""The nodes the layout is checked on: the demo's 8x MI300X (tests.tui.conftest) and one real H200 replayed from its
recorded NVML capture (tests/fixtures/nvml/h200_procs_replay.json: a torch job and a second CUDA process)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from amdtop.model import NodeSnapshot
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize
from tests.tui.conftest import FROZEN, make_app, open_app, settle
from tui.app import AmdtopApp

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "nvml" / "h200_procs_replay.json"
SIZES = ((80, 24), (120, 40), (160, 45), (200, 50), (250, 70))
"""From a laptop's 80x24 to a wide monitor's 250x70 (the issue's list)."""


class SteppedNvml(NvmlBackend):
    """The capture's polls one second apart, whatever the machine running the tests: the throttle flag says "of the
    last N s" from the snapshots' times, and six polls that took under a second here read "0 s", over it "1 s" (a
    snapshot failed on a loaded CI machine)."""

    _polls = 0

    def sample(self) -> NodeSnapshot:
        self._polls += 1
        return replace(super().sample(), timestamp=FROZEN + self._polls)


def one_gpu_app() -> AmdtopApp:
    """The dashboard over the real H200 capture: one GPU, its two processes, no workers."""
    fixture = load_fixture(H200)
    root = Path(tempfile.mkdtemp(prefix="amdtop-h200-"))
    sysfs, proc = materialize(fixture, root)
    backend = SteppedNvml(ReplayNvml(fixture), BackendOptions(sysfs_root=sysfs, proc_root=proc))
    backend._hostname = "h200-capture"  # the capture's host, not the one running the tests
    return open_app(backend, clock=lambda: FROZEN, proc_root=proc, state_dir=root, autopoll=False, discover=False)


def node_app(node: str) -> AmdtopApp:
    """``demo``: 8x MI300X; ``cpx``: the same GPUs in CPX mode (64 HIP devices, a wider matrix); ``h200``: one GPU."""
    if node == "h200":
        return one_gpu_app()
    return make_app("mi300x-8-cpx" if node == "cpx" else "mi300x-8")


POLLS = {"demo": 6, "cpx": 6, "h200": 6}
"""Ticks before a picture: the capture holds six polls (its history, its processes' SM shares)."""


async def fill(pilot: Any, node: str = "demo") -> None:
    """Poll the node, then let the panes draw."""
    await pilot.pause()
    pilot.app.step(POLLS[node])
    await settle(pilot)
