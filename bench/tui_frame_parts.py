"""Where a dashboard frame's CPU goes, per widget: the demo app headless (Pilot, 200x50) with its real poller thread
at 1 Hz (and, with ``--workers``, the three demo workers as real processes), timing each widget's ``render_lines``,
the compositor refresh and the dashboard's ``apply`` for ``--frames`` seconds. Run it on another checkout with
``PYTHONPATH=DIR`` for a before/after (only public Textual methods are wrapped, so any version of the panes works).

    .venv/bin/python bench/tui_frame_parts.py --workers --frames 30
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from pathlib import Path
from typing import Any

from textual.screen import Screen
from textual.widget import Widget

import tui.screens.dashboard as dashboard
from amdtop import runtime
from amdtop.runtime import NodeParts, NodeSpec
from amdtop.supervisor import Supervisor
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS
from tui.app import AmdtopApp

spent: collections.Counter[str] = collections.Counter()


def timed(cls: Any, name: str, label: Any) -> None:
    original = getattr(cls, name)

    def wrapper(self: Any, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args)
        finally:
            spent[label(self)] += time.perf_counter() - start

    setattr(cls, name, wrapper)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", action="store_true", help="launch the demo workers (else read-only)")
    ap.add_argument("--frames", type=int, default=30)
    a = ap.parse_args()
    timed(Widget, "render_lines", lambda w: f"render {w.id or type(w).__name__}")
    timed(Screen, "_compositor_refresh", lambda _: "compositor (all)")
    timed(dashboard.DashboardScreen, "apply", lambda _: "apply (all)")
    sim = SimBackend()
    state = Path(tempfile.mkdtemp(prefix="amdtop-frame-"))
    sup = Supervisor(
        state / "none.toml", state, gate=PASS, topology=sim.topology(), demo=True, sim=sim, demo_port_base=18450
    )
    if a.workers:
        for name in sup.names():
            sup.launch(name)
        for name in sup.names():
            sup.wait_ready(name, timeout=60)
    # Opened as `amdtop` opens a node (the supervisor standing in for the profile file's): one LocalService.
    spec = NodeSpec(config=state / "none.toml", state_dir=state, readonly=not a.workers)
    parts = NodeParts(backend=sim, workers=sup, demo_load=sup.demo_load(), discover=False)
    node = runtime.open(spec, ui=True, kernel=False, parts=parts)
    app = AmdtopApp(node, state_dir=state)
    node.runtime.start()

    async def run() -> None:
        async with app.run_test(size=(200, 50)) as pilot:
            await asyncio.sleep(5)
            await pilot.pause()
            spent.clear()
            cpu = time.process_time()
            await asyncio.sleep(a.frames)
            total = time.process_time() - cpu
            print(f"process CPU per frame {1e3 * total / a.frames:.2f} ms (headless: no terminal output)")
            for label, seconds in spent.most_common(12):
                print(f"  {label:28s} {1e3 * seconds / a.frames:6.2f} ms")

    try:
        asyncio.run(run())
    finally:
        node.runtime.stop()
        if a.workers:
            for name in sup.names():
                sup.stop(name, grace=2)
        sup.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
