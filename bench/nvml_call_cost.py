"""CPU and wall time of each NVML call amdtop's health fields make, and of a full backend poll with and without them.

python3 bench/nvml_call_cost.py --n 200 --json out.json      (on a machine with an NVIDIA GPU)
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

import pynvml  # type: ignore[import-not-found,unused-ignore]

from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import NvmlBackend


class CoreOnly(NvmlBackend):
    """The backend without the health fields: the peer the health fields' cost is measured against."""

    def _event_reasons(self, dev: Any) -> None:
        return None

    def _violations(self, dev: Any) -> tuple[None, None]:
        return None, None

    def _ecc(self, dev: Any) -> None:
        return None

    def _nvlink_counters(self, dev: Any) -> None:
        return None


def cost(fn: Any, n: int) -> dict[str, float]:
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            fn()
        except pynvml.NVMLError:
            pass
        cpu.append((time.process_time() - c0) * 1e6)
        wall.append((time.perf_counter() - w0) * 1e6)
    return {"cpu_us_median": statistics.median(cpu), "wall_us_median": statistics.median(wall)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    calls = {
        "utilization (peer)": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
        "clock_event_reasons": lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "violation_power": lambda: pynvml.nvmlDeviceGetViolationStatus(h, 0),
        "violation_thermal": lambda: pynvml.nvmlDeviceGetViolationStatus(h, 1),
        "total_ecc_uncorrected_volatile": lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, 1, 0),
        "memory_error_counter_dram": lambda: pynvml.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, 2),
        "memory_error_counter_sram": lambda: pynvml.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, 7),
        "field_values_nvlink_tx_rx": lambda: pynvml.nvmlDeviceGetFieldValues(h, [(138, 0), (139, 0)]),
    }
    out: dict[str, Any] = {name: cost(fn, args.n) for name, fn in calls.items()}
    polls: dict[str, list[float]] = {"full": [], "core": []}
    backends = {"full": NvmlBackend(pynvml, BackendOptions()), "core": CoreOnly(pynvml, BackendOptions())}
    for b in backends.values():
        for _ in range(20):
            b.sample()
    for _ in range(11):
        for name, b in backends.items():
            c0 = time.process_time()
            for _ in range(50):
                b.sample()
            polls[name].append((time.process_time() - c0) * 1e3 / 50)
    out["poll_full_ms_median"] = statistics.median(polls["full"])
    out["poll_core_ms_median"] = statistics.median(polls["core"])
    for name, row in out.items():
        print(name, row)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
