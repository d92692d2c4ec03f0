"""How steady a CPU vLLM server is under one steady stream, and how much the client core's activity moves it.

Two measurements against a running server (the e2e TP=1 profile: whole server on core 1), from the server's own
`vllm:inter_token_latency_seconds` and `vllm:time_to_first_token_seconds` counters, with amdtop's step on core 0:

- drift: one C=1 step of SECONDS, the server's mean inter-token latency sampled every second;
- neighbours: ROUNDS x (nothing, a niced pure-Python loop, a niced memory-streaming numpy loop) on core 0 next to
  a 6 s C=1 step each, the server's mean TTFT and inter-token latency for each.

Usage: python bench/server_drift.py --url http://127.0.0.1:18010 --model tiny-llama [--input-len 512]
       [--seconds 30] [--rounds 3] [--numpy-python .venv-vllm/bin/python]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time

import httpx

from amdtop.ramp.client import load_spec, run_step
from amdtop.supervisor.metrics import parse_samples

CLIENT_CPU = 0
NAMES = ("inter_token_latency_seconds", "time_to_first_token_seconds")


def counters(url: str) -> dict[str, float]:
    s = parse_samples(httpx.get(f"{url}/metrics", timeout=10).text)
    return {f"{n}_{part}": s.get(f"vllm:{n}_{part}", 0.0) for n in NAMES for part in ("sum", "count")}


def mean_ms(before: dict[str, float], after: dict[str, float], name: str) -> float:
    n = after[f"{name}_count"] - before[f"{name}_count"]
    return 1000.0 * (after[f"{name}_sum"] - before[f"{name}_sum"]) / n if n else float("nan")


def step(url: str, model: str, input_len: int, seconds: float) -> None:
    async def go() -> None:
        await run_step(await load_spec(url, model, input_len, 64), 1, warmup_s=0.5, duration_s=seconds)

    asyncio.run(go())


def drift(url: str, model: str, input_len: int, seconds: float) -> None:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        prev = counters(url)
        while not done.wait(1.0):
            now = counters(url)
            samples.append(mean_ms(prev, now, "inter_token_latency_seconds"))
            prev = now

    t = threading.Thread(target=sample)
    t.start()
    step(url, model, input_len, seconds)
    done.set()
    t.join()
    busy = [s for s in samples if s == s]
    print(f"drift: inter-token latency per second (ms): {[round(s, 2) for s in busy]}")
    print(f"drift: min {min(busy):.2f} median {statistics.median(busy):.2f} max {max(busy):.2f} ms")


def neighbours(url: str, model: str, input_len: int, rounds: int, numpy_python: str) -> None:
    pin = ["nice", "-n", "19", "taskset", "-c", str(CLIENT_CPU)]
    loads = {
        "nothing": None,
        "python loop": [*pin, sys.executable, "-c", "while True: pass"],
        "memory stream": [*pin, numpy_python, "-c", "import numpy as np\na=np.ones(8*1024*1024)\nwhile True: a+=1"],
    }
    for r in range(rounds):
        for name, argv in loads.items():
            proc = subprocess.Popen(argv) if argv else None
            time.sleep(1.0)
            try:
                before = counters(url)
                step(url, model, input_len, 6.0)
                time.sleep(0.5)  # the engine's stats reach the API server a moment after the last response
                after = counters(url)
            finally:
                if proc:
                    proc.kill()
                    proc.wait()
            print(
                f"neighbours round {r} {name:13s}: server TTFT {mean_ms(before, after, NAMES[1]):6.2f} ms, "
                f"inter-token latency {mean_ms(before, after, NAMES[0]):5.2f} ms"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--numpy-python", default=".venv-vllm/bin/python", help="a Python with numpy")
    a = ap.parse_args()
    os.sched_setaffinity(0, {CLIENT_CPU})
    url = a.url.rstrip("/")
    drift(url, a.model, a.input_len, a.seconds)
    neighbours(url, a.model, a.input_len, a.rounds, a.numpy_python)


if __name__ == "__main__":
    main()
