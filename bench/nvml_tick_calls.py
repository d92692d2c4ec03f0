"""CPU of each NVML call one amdtop tick makes on GPU 0, as the tick makes it (the same arguments), and of the whole
backend poll: run it beside a load to see which call a busy GPU makes dear (issue 53: the runtime thread's share of a
busy tick). Median CPU and wall microseconds over ``--n`` calls, one JSON object.

    python3 bench/nvml_tick_calls.py --n 300 --json out.json      (on a machine with an NVIDIA GPU)
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pynvml  # type: ignore[import-not-found,unused-ignore]
from nvml_call_cost import cost  # the same timing: median CPU and wall us over n calls

from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import _VIOLATION_FIELDS, NvmlBackend


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    since = [0]

    def proc_util() -> None:
        try:
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, since[0])
        except pynvml.NVMLError:
            return
        since[0] = max([since[0], *(int(s.timeStamp) for s in samples)])

    calls: dict[str, Any] = {
        "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "memory_info": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        "power_usage": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
        "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, 0),
        "clock_sm": lambda: pynvml.nvmlDeviceGetClockInfo(h, 1),
        "clock_mem": lambda: pynvml.nvmlDeviceGetClockInfo(h, 2),
        "clock_event_reasons": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "compute_processes (every 3 s)": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        "process_utilization (every 3 s)": proc_util,
        "field_values_violations (every 5 polls)": lambda: pynvml.nvmlDeviceGetFieldValues(
            h, [fid for fid, _ in _VIOLATION_FIELDS]
        ),
        "total_ecc (x2, every 10 polls)": lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0),
        "memory_error_counter (x4, every 10 polls)": lambda: pynvml.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, 2),
    }
    out: dict[str, Any] = {name: cost(fn, args.n) for name, fn in calls.items()}
    backend = NvmlBackend(pynvml, BackendOptions())
    for _ in range(20):
        backend.sample()
    polls = []
    for _ in range(11):
        c0 = time.process_time()
        for _ in range(30):
            backend.sample()
        polls.append((time.process_time() - c0) * 1e6 / 30)
    out["backend_poll_us (as the tick: cadences included)"] = round(statistics.median(polls), 1)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
