"""Scrape cost of ``amdtop export`` on the 8-GPU demo node against the raw poll cost, measured in one run.

Usage: .venv/bin/python bench/scrape.py [--n 300] [--port 19430]  (uses PORT and PORT+1)

Prints medians of: the raw poll (SimBackend.sample), an in-process render that polls (min_interval 0), an
in-process render served from the cache, and HTTP scrapes of a real ``amdtop export --demo`` subprocess (demo
profiles through the supervisor) polling on every scrape and serving from its cache (wall time seen by the client,
CPU time the exporter process spent per scrape, read from /proc through psutil).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from amdtop.exporter import Exporter
from amdtop.pipeline import NodeFrame, NodePipeline
from amdtop.telemetry.sim import GpuDemand, SimBackend

GIB = 1024**3


def timed(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """Median wall and mean CPU seconds of ``fn`` over ``n`` runs (after 10 warm-up runs)."""
    for _ in range(10):
        fn()
    walls = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls), (time.process_time() - cpu0) / n


def demo_sim() -> SimBackend:
    sim = SimBackend(seed=0)
    sim.set_demand("llama-a", {i: GpuDemand(0.8, 150 * GIB, 1000) for i in range(4)})
    sim.set_demand("llama-b", {i: GpuDemand(0.6, 120 * GIB, 1001) for i in range(4, 8)})
    return sim


def http_scrapes(port: int, n: int, interval: str) -> tuple[float, float, int]:
    """Median client wall time and exporter CPU per scrape (``interval`` 0.001: every scrape polls)."""
    argv = [sys.executable, "-m", "amdtop", "export", "--demo", "--interval", interval, "--listen", f"127.0.0.1:{port}"]
    argv += ["--config", "/nonexistent/amdtop-bench.toml", "--state-dir", "/tmp/amdtop-bench-state"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                time.sleep(0.1)
        size = 0
        for _ in range(10):
            size = len(urllib.request.urlopen(url, timeout=5).read())
        ps = psutil.Process(proc.pid)
        c0 = ps.cpu_times()
        walls = []
        for _ in range(n):
            t0 = time.perf_counter()
            urllib.request.urlopen(url, timeout=5).read()
            walls.append(time.perf_counter() - t0)
        c1 = ps.cpu_times()
        cpu = (c1.user - c0.user + c1.system - c0.system) / n
        return statistics.median(walls), cpu, size
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--port", type=int, default=19430)
    args = parser.parse_args()

    sim = demo_sim()
    poll_wall, poll_cpu = timed(sim.sample, args.n)
    provider = NodePipeline(sim, state_dir=Path("/tmp/amdtop-bench-state")).tick
    provider_wall, provider_cpu = timed(provider, args.n)
    uncached = Exporter(lambda: NodeFrame(sim.sample()), "127.0.0.1:0", min_interval=0.0)
    render_wall, render_cpu = timed(uncached.render, args.n)
    cached = Exporter(lambda: NodeFrame(sim.sample()), "127.0.0.1:0", min_interval=3600.0)
    cached_wall, cached_cpu = timed(cached.render, args.n)
    http_wall, http_cpu, size = http_scrapes(args.port, args.n, "0.001")
    hc_wall, hc_cpu, _ = http_scrapes(args.port + 1, args.n, "3600")

    us = 1e6
    print(f"8-GPU demo node, n={args.n}, page {size} bytes")
    print(f"{'what':<44}{'median wall us':>16}{'CPU us/call':>14}{'x raw poll':>12}")
    rows = [
        ("raw poll (SimBackend.sample)", poll_wall, poll_cpu),
        ("NodePipeline tick (+ workers/flags/files)", provider_wall, provider_cpu),
        ("render, polling (min_interval 0)", render_wall, render_cpu),
        ("render, cached (burst within min_interval)", cached_wall, cached_cpu),
        ("HTTP scrape of amdtop export (polling)", http_wall, http_cpu),
        ("HTTP scrape of amdtop export (cached)", hc_wall, hc_cpu),
    ]
    for name, wall, cpu in rows:
        print(f"{name:<44}{wall * us:>16.0f}{cpu * us:>14.0f}{wall / poll_wall:>12.1f}")


if __name__ == "__main__":
    main()
