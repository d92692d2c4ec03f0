"""Synthetic traffic inside the simulated server, so a ``--demo`` node looks busy without a client.

The number of synthetic sequences follows a slow sine between 30 % and 100 % of ``--background-load``; the engine
treats them like client requests (slots, counters, /metrics), so the simulated GPUs, the worker strip and the
exporter all see a moving load. Off by default: tests and ramps measure the server alone.
"""

from __future__ import annotations

import asyncio
import math
import time

from amdtop.simserver.engine import SimEngine, SimRequest

PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128


def target(load: int, period_s: float, t: float) -> int:
    """How many synthetic sequences should be in flight at ``t`` seconds."""
    phase = 0.65 + 0.35 * math.sin(2 * math.pi * t / period_s)
    return max(0, round(load * phase))


async def run_background(engine: SimEngine, load: int, period_s: float = 40.0) -> None:
    """Keep ``target(...)`` synthetic requests in the engine until cancelled."""
    live: set[SimRequest] = set()
    t0 = time.monotonic()
    while True:
        want = target(load, period_s, time.monotonic() - t0)
        live = {r for r in live if not r.done}
        for _ in range(want - len(live)):
            req = SimRequest(PROMPT_TOKENS, OUTPUT_TOKENS, on_token=lambda _i: None, on_finish=lambda _r: None)
            live.add(req)
            engine.submit(req)
        await asyncio.sleep(0.5)
