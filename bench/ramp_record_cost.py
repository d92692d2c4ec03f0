"""Cost of the ramp's per-step recording: amdtop's closed loop with and without it, alternating, on the zero-work server.

Usage: .venv/bin/python bench/ramp_record_cost.py [--rounds 6] [--conc 64] [--seconds 3]

Both variants run the same ``run_step`` against bench/loadgen.py's zero-work server (which serves a real vLLM /metrics
page); "record" wraps it in ``recorded_step`` (scrape + parse every 0.5 s, the server process through psutil). Printed:
medians of completed requests per second and of requests per CPU-second of the client thread (robust to a shared box).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loadgen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=18196)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    srv = subprocess.Popen([sys.executable, loadgen.__file__, "--serve", "--port", str(a.port), "--out-len", "16"])
    time.sleep(1)
    res: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        for i in range(a.rounds):
            for rec in (True, False) if i % 2 else (False, True):
                d = asyncio.run(loadgen.amdtop_run(a.port, a.conc, a.seconds, 16, rec))
                rate = d["request_throughput"]
                res[rec].append((rate, rate / (d["client_cpu_pct"] / 100)))
    finally:
        srv.terminate()
        srv.wait()
    print("| variant | req/s (median) | req per CPU-s (median) | req per CPU-s, runs |\n|---|---:|---:|---|")
    for rec, v in res.items():
        print(f"| {'record' if rec else 'plain'} | {statistics.median(x for x, _ in v):.0f} | "
              f"{statistics.median(y for _, y in v):.0f} | {', '.join(f'{y:.0f}' for _, y in v)} |")  # fmt: skip


if __name__ == "__main__":
    main()
