"""UI responsiveness of the log tail pane under a log flood: key-to-screen latency measured with Pilot.

Usage: .venv/bin/python bench/tail_flood.py [--rate 50000] [--presses 30]
A separate writer process appends RCCL-like lines to a file at --rate lines/s; the app follows it with LogFollower
from a thread worker every 0.25 s (as the dashboard does) and feeds LogTailPane. Each sample presses ``e`` (filter
toggle, which rebuilds the tail) and measures until the pane's state changed and the screen was refreshed
(``pilot.pause()`` returns after the resulting messages and repaint were processed). The same measurement without
the flood, in the same run, is the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textual import work
from textual.app import App, ComposeResult
from textual.message import Message

from amdtop.logread.rccl.lines import LogBatch
from amdtop.logread.rccl.tail import LogFollower
from widgets.log_tail import LogTailPane

WRITER = r"""
import sys, time
path, rate = sys.argv[1], int(sys.argv[2])
line = "n1:4101:4160 [0] NCCL INFO Channel 00/0 : 0[5000] -> 1[26000] via P2P/IPC comm 0x55d0c0a1b2c0 nRanks 08 #%d\n"
warn = "n1:4101:4101 [0] init.cc:179 NCCL WARN something %d\n"
n, t0, tick = 0, time.monotonic(), 0.02
with open(path, "a", buffering=1 << 20) as fh:
    while True:
        due = int((time.monotonic() - t0) * rate)
        while n < due:
            fh.write(warn % n if n % 1000 == 0 else line % n)
            n += 1
        fh.flush()
        time.sleep(tick)
"""


class Batch(Message):
    def __init__(self, batch: LogBatch) -> None:
        super().__init__()
        self.batch = batch


class FloodApp(App[None]):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.follower = LogFollower([("flood", path)], max_lines=2000)
        self.stop = threading.Event()
        self.fed = 0
        self.dropped = 0
        self.frames: list[float] = []

    def _display(self, screen, renderable) -> None:  # type: ignore[no-untyped-def]
        # timestamp every frame the app writes to the (headless) terminal: "on screen" = written here
        self.frames.append(time.perf_counter())
        super()._display(screen, renderable)

    def compose(self) -> ComposeResult:
        yield LogTailPane(id="logs", max_lines=2000)

    def on_mount(self) -> None:
        self.query_one(LogTailPane).focus()
        self.tail()

    @work(thread=True, exclusive=True)
    def tail(self) -> None:
        while not self.stop.wait(0.25):
            self.post_message(Batch(self.follower.poll()))

    def on_batch(self, msg: Batch) -> None:
        self.fed += len(msg.batch.lines)
        self.dropped += msg.batch.dropped
        self.query_one(LogTailPane).feed(msg.batch.lines, msg.batch.dropped)


async def measure(path: Path, presses: int) -> tuple[list[float], list[float], int, int, float]:
    app = FloodApp(path)
    lat: list[float] = []
    round_trip: list[float] = []
    async with app.run_test(size=(160, 50)) as pilot:
        await asyncio.sleep(1.0)
        pane = app.query_one(LogTailPane)
        rebuilt: list[float] = []
        original = pane._rebuild

        def stamped() -> None:
            original()
            rebuilt.append(time.perf_counter())  # the tail now holds the filtered lines

        pane._rebuild = stamped  # type: ignore[method-assign]
        t_start = time.monotonic()
        for _ in range(presses):
            before = pane.mode
            t = time.perf_counter()
            await pilot.press("e")
            while pane.mode == before:
                await asyncio.sleep(0)
            await pilot.pause()
            # first frame written after the key's handler rebuilt the tail with the new filter
            frame = next((f for f in app.frames if rebuilt and f >= rebuilt[-1]), None)
            round_trip.append((time.perf_counter() - t) * 1000)
            if frame is not None:
                lat.append((frame - t) * 1000)
            await asyncio.sleep(0.1)
        span = time.monotonic() - t_start
        app.stop.set()
    return lat, round_trip, app.fed, app.dropped, span


def _p95(xs: list[float]) -> float:
    return round(sorted(xs)[int(0.95 * (len(xs) - 1))], 1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=50_000)
    ap.add_argument("--presses", type=int, default=30)
    args = ap.parse_args()
    out: dict[str, object] = {"rate_lines_per_s": args.rate, "presses": args.presses}
    with tempfile.TemporaryDirectory() as tmp:
        quiet = Path(tmp) / "quiet.log"
        quiet.write_text("")
        lat, rt, _fed, _dropped, _span = asyncio.run(measure(quiet, args.presses))
        out["idle_median_ms"] = round(statistics.median(lat), 1)
        out["idle_p95_ms"] = _p95(lat)
        out["idle_pilot_round_trip_median_ms"] = round(statistics.median(rt), 1)
        log = Path(tmp) / "flood.log"
        log.write_text("")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(args.rate)])
        try:
            lat, rt, fed, dropped, span = asyncio.run(measure(log, args.presses))
        finally:
            writer.terminate()
            writer.wait()
        with open(log, "rb") as fh:
            written = sum(1 for _ in fh)
    out["flood_median_ms"] = round(statistics.median(lat), 1)
    out["flood_p95_ms"] = _p95(lat)
    out["flood_pilot_round_trip_median_ms"] = round(statistics.median(rt), 1)
    out["samples"] = len(lat)
    out["flood_max_ms"] = round(max(lat), 1)
    out["lines_written"] = written
    out["lines_shown"] = fed
    out["lines_dropped"] = dropped
    out["measure_span_s"] = round(span, 1)
    out["load_avg_1m"] = round(os.getloadavg()[0], 1)
    out["flood_over_idle_median"] = round(out["flood_median_ms"] / max(out["idle_median_ms"], 0.1), 1)  # type: ignore[operator]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
