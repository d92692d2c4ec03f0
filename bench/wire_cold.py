"""The wire's parts as a 1 Hz program pays for them: each call timed once a second (``time.thread_time_ns``), after a
small decode that wakes the interpreter, against the same call hot (back to back). On the dev VM a part costs 5-10x
its hot figure cold (docs/benchmarks.md, session 19). Frames come from the real NVML backend answered by a capture.

    .venv/bin/python bench/wire_cold.py tests/fixtures/nvml/h200_replay.json
    PYTHONPATH=/tmp/old .venv/bin/python -P /tmp/old/bench/wire_cold.py ...   # an earlier tree (git archive)

``--no-warm`` leaves the warm-up out (the first thing after a wake pays the wake: a tiny message then costs 80 us).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--cold", type=int, default=12, help="cold calls, one a second")
    ap.add_argument("--no-warm", action="store_true")
    a = ap.parse_args()
    from amdtop import runtime
    from amdtop.runtime import NodeSpec
    from amdtop.serve.delta import apply_history_delta, history_delta
    from amdtop.serve.viewers import FramePacket
    from amdtop.serve.wire import decode, encode
    from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture

    sys.modules["pynvml"] = ReplayNvml(load_fixture(Path(a.fixture)))  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-cold-"))
    node = runtime.open(NodeSpec(config=tmp / "none.toml", state_dir=tmp, backend="nvml"), ui=True, kernel=False)
    try:
        frames = [node._node.pipeline.tick() for _ in range(300 + 2 + a.cold + 300)][300:]  # every series full (300 points)
    finally:
        node.shutdown()
    tiny = encode({"type": "x", "v": [1.0, 2.0]})

    def warm() -> None:
        if not a.no_warm:
            decode(tiny[4:], None)

    def run(name: str, fn: Callable[[int], object]) -> None:
        cold = []
        for i in range(a.cold):
            time.sleep(1.0)
            warm()
            t = time.thread_time_ns()
            fn(i)
            cold.append(time.thread_time_ns() - t)
        hot = []
        for i in range(300):
            t = time.thread_time_ns()
            fn(i % a.cold)
            hot.append(time.thread_time_ns() - t)
        print(f"{name:44} cold {statistics.median(cold) / 1e3:7.1f} us   hot {statistics.median(hot) / 1e3:6.1f} us")

    f = frames
    steps = len(f) - 1
    deltas = [FramePacket(f[i + 1], f[i]).after(f[i]) for i in range(steps)]
    hist = [history_delta(f[i].history, f[i + 1].history) for i in range(steps)]

    def chain(step: Callable[[Any, int], Any], first: Any) -> Callable[[int], object]:
        """A viewer's own chain: each call moves its last frame (or history) on by the next delta, as a running
        viewer does; against the serve's frames instead, every series would be copied (their lists moved on)."""
        held = [first]
        calls = [0]

        def call(_i: int) -> object:
            k = calls[0] % steps
            if k == 0:
                held[0] = first
            held[0] = step(held[0], k)
            calls[0] += 1
            return held[0]

        return call

    first = decode(FramePacket(f[0]).whole()[4:])["frame"]
    run("decode a tiny message", lambda i: decode(tiny[4:], None))
    run("viewer: decode a delta frame", chain(lambda last, k: decode(deltas[k][4:], last)["frame"], first))
    run("serve: history_delta", lambda i: history_delta(f[i].history, f[i + 1].history))
    run("viewer: apply_history_delta", chain(lambda last, k: apply_history_delta(last, hist[k]), first.history))  # type: ignore[arg-type]
    run("serve: encode a delta frame (history_delta in)", lambda i: FramePacket(f[i + 1], f[i]).after(f[i]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
