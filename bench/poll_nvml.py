"""CPU time of one full NVML poll: amdtop's nvml backend against the raw pynvml calls for the same metrics.

Both sides poll every GPU for utilisation, memory, power, temperature, SM and memory clocks and compute processes,
with handles looked up once. Each round times ``--polls`` polls with ``time.process_time`` and divides; the
report gives the median over ``--rounds`` rounds, interleaving the two sides so drift hits both alike.

    python3 bench/poll_nvml.py --rounds 21 --polls 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml

from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend


def raw_poll(handles: list[Any]) -> list[tuple[Any, ...]]:
    """The same metrics straight from pynvml, no model objects."""
    out = []
    for h in handles:
        u = pynvml.nvmlDeviceGetUtilizationRates(h)
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        p = pynvml.nvmlDeviceGetPowerUsage(h)
        t = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        s = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        c = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        out.append((u.gpu, u.memory, m.used, m.total, p, t, s, c, [(x.pid, x.usedGpuMemory) for x in procs]))
    return out


def per_poll_cpu_ms(fn: Any, polls: int) -> float:
    t0 = time.process_time()
    for _ in range(polls):
        fn()
    return (time.process_time() - t0) * 1000.0 / polls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--polls", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    backend = NvmlBackend(pynvml, BackendOptions())
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    for _ in range(20):  # warm caches and the unsupported-field memo
        backend.sample()
        raw_poll(handles)
    amd: list[float] = []
    raw: list[float] = []
    for _ in range(args.rounds):
        raw.append(per_poll_cpu_ms(lambda: raw_poll(handles), args.polls))
        amd.append(per_poll_cpu_ms(backend.sample, args.polls))
    result = {
        "gpus": len(handles),
        "gpu_name": backend.topology().gpus[0].name,
        "rounds": args.rounds,
        "polls_per_round": args.polls,
        "raw_nvml_ms_median": statistics.median(raw),
        "amdtop_nvml_ms_median": statistics.median(amd),
        "ratio_amdtop_over_raw": statistics.median(amd) / statistics.median(raw),
        "raw_all": raw,
        "amdtop_all": amd,
    }
    backend.close()
    print(
        f"NVML poll CPU per poll, {len(handles)} GPU(s), median of {args.rounds} rounds x {args.polls} polls: "
        f"raw {result['raw_nvml_ms_median']:.4f} ms, amdtop {result['amdtop_nvml_ms_median']:.4f} ms, "
        f"ratio {result['ratio_amdtop_over_raw']:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
