"""CPU per tick of the process rows: N real processes listed on the (simulated) GPUs, host facts read each tick.

Starts ``--procs`` real processes (``sleep``), lists them on the simulated node's GPUs (the backend part costs
nothing here: the rows come from the sim's process list), and times :meth:`ProcessTable.rows` over ``--ticks`` ticks
with ``time.process_time`` (CPU, not wall). Two ways of reading CPU and RSS each tick, measured interleaved:
``stat`` (amdtop's: psutil oneshot identifies a process; after it, per tick, the process's CPU clock and one
``pread`` of a kept ``/proc/PID/statm`` descriptor; the key keeps its name from when that was ``/proc/PID/stat``,
so older results compare) and ``psutil`` (psutil's oneshot with ``cpu_times`` and ``memory_info`` on every tick).
Identity re-reads every 10 s are inside the window when ``--ticks`` x ``--interval`` spans them.

    .venv/bin/python bench/gpu_procs.py --procs 64 --ticks 200 --rounds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amdtop.gpuprocs import HostProcs, ProcessTable
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend


def measure(mode: str, pids: list[int], ticks: int, interval: float) -> float:
    """Median CPU seconds per tick of the rows for ``pids`` (8 GPUs, the pids spread over them)."""
    sim = SimBackend(seed=1)
    for i, pid in enumerate(pids):
        sim.set_demand(f"p{i}", {i % 8: GpuDemand(0.3, 1 * GIB, pid, f"p{i}")})
    snap = sim.sample()
    table = ProcessTable(HostProcs(psutil_every_tick=mode == "psutil"))
    table.rows(snap, ())  # first sight: psutil identifies every process (not a steady tick)
    costs = []
    for _ in range(ticks):
        if interval:
            time.sleep(interval)
        t0 = time.process_time()
        rows, _ = table.rows(snap, ())
        costs.append(time.process_time() - t0)
        assert len(rows) == len(pids) and all(r.cpu_pct is not None for r in rows)
    return statistics.median(costs)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=64)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.0, help="sleep between ticks (0: back to back)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(args.procs)]
    try:
        pids = [c.pid for c in children]
        runs: dict[str, list[float]] = {"stat": [], "psutil": []}
        for _ in range(args.rounds):
            for mode in runs:
                runs[mode].append(measure(mode, pids, args.ticks, args.interval))
    finally:
        for c in children:
            c.kill()
            c.wait()
    med = {m: statistics.median(v) * 1e3 for m, v in runs.items()}
    doc = {
        "procs": args.procs,
        "ticks": args.ticks,
        "rounds": args.rounds,
        "host": platform.node(),
        "python": platform.python_version(),
        "median_ms_per_tick": med,
        "runs_ms": {m: [round(x * 1e3, 4) for x in v] for m, v in runs.items()},
        "ratio_stat_over_psutil": med["stat"] / med["psutil"],
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
