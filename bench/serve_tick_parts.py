"""Where one tick of ``amdtop serve`` goes, part by part, on this machine: the pipeline's tick (the backend poll, the
workers' status pass, the analysis), and the frame's encodings for the viewers (the
whole frame, for a viewer that just attached or missed a tick; the delta form, for a viewer that holds the previous
tick), the same frame fanned out to N viewers' queues (pickled once per form whatever N is), and (session 14) the
viewer's side of a delta frame: decoded by the checking unpickler, its kept parts and history put back.

    .venv/bin/python bench/serve_tick_parts.py replay tests/fixtures/nvml/h200_health_idle_replay.json
    .venv/bin/python bench/serve_tick_parts.py demo

Prints the median wall and CPU microseconds of each part over ``--ticks`` ticks (default 60). Absolute numbers move
5-10x between machines: compare parts within one run.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amdtop import runtime
from amdtop.runtime import NodeSpec
from amdtop.serve.viewers import FramePacket, ViewerLink
from amdtop.serve.wire import decode


def _timed(parts: dict[str, list[tuple[float, float]]], name: str, fn: Callable[[], Any]) -> Any:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    parts.setdefault(name, []).append((time.perf_counter() - w, time.process_time() - c))
    return out


def _moved_on(data: bytes, last: Any) -> Any:
    """What ``ServeClient`` does with a delta frame's bytes: decode, its references resolved from the last frame."""
    return decode(data[4:], last)["frame"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("replay", "demo"))
    p.add_argument("fixture", nargs="?")
    p.add_argument("--ticks", type=int, default=60)
    p.add_argument("--viewers", type=int, default=4)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-tick-"))
    if a.mode == "replay":
        from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture

        sys.modules["pynvml"] = ReplayNvml(load_fixture(Path(a.fixture)))  # type: ignore[assignment]
        spec = NodeSpec(config=tmp / "none.toml", state_dir=tmp, backend="nvml")
    else:
        spec = NodeSpec(config=tmp / "none.toml", state_dir=tmp, demo=True)
    node = runtime.open(spec, ui=True, kernel=False)
    # Viewers whose sockets nobody reads: the queues fill and drop, as for a stalled viewer (the writer threads are
    # not started: the fan-out is the serve's part of the cost).
    links = [ViewerLink(socket.socketpair()[0], i, False) for i in range(a.viewers)]
    parts: dict[str, list[tuple[float, float]]] = {}
    previous = None
    viewer: Any = None
    """The viewer's own last frame (decoded, its series moved on from its own): what a delta is read against."""
    try:
        for _ in range(a.ticks):
            frame = _timed(parts, "pipeline tick (poll, status, analysis)", node._node.pipeline.tick)
            packet = FramePacket(frame, previous)
            _timed(parts, "encode whole frame", packet.whole)
            if previous is not None:
                moved = _timed(parts, "encode delta frame", lambda: packet.after(previous))  # noqa: B023
                # Session 14: the viewer's side of the same bytes (its reader thread's work per frame).
                viewer = _timed(parts, "viewer: decode delta frame, move on", lambda: _moved_on(moved, viewer))  # noqa: B023
            else:
                viewer = decode(packet.whole()[4:])["frame"]
            _timed(parts, f"offer to {a.viewers} viewer queues", lambda: [v.offer_frame(packet) for v in links])  # noqa: B023
            previous = frame
    finally:
        node.shutdown()
    print(f"{a.mode}: {a.ticks} ticks, {len(frame.snapshot.gpus)} GPUs, {len(frame.workers)} workers")
    print(f"{'part':45} {'wall us':>10} {'cpu us':>10}")
    for name, samples in parts.items():
        wall = statistics.median(s[0] for s in samples) * 1e6
        cpu = statistics.median(s[1] for s in samples) * 1e6
        print(f"{name:45} {wall:10.0f} {cpu:10.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
