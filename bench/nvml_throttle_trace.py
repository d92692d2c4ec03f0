"""Trace NVML clock-event reasons, violation counters, SM clock and power every INTERVAL s (JSON lines).

The raw readings behind amdtop's throttle share: run on a GPU machine under load, e.g.
``python3 bench/nvml_throttle_trace.py --seconds 20 --interval 0.5 --out trace.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import pynvml  # type: ignore[import-not-found,unused-ignore]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    end = time.time() + args.seconds
    rows = 0
    with open(args.out, "w") as fh:
        while time.time() < end:
            row: dict[str, object] = {"t": time.time()}
            row["reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
            for policy in (0, 1, 2, 3, 5):
                try:
                    v = pynvml.nvmlDeviceGetViolationStatus(h, policy)
                    row[f"violation{policy}"] = [int(v.referenceTime), int(v.violationTime)]
                except pynvml.NVMLError as exc:
                    row[f"violation{policy}"] = str(exc)
            row["sm_mhz"] = int(pynvml.nvmlDeviceGetClockInfo(h, 1))
            row["power_mw"] = int(pynvml.nvmlDeviceGetPowerUsage(h))
            fh.write(json.dumps(row) + "\n")
            rows += 1
            time.sleep(args.interval)
    sys.stderr.write(f"{rows} rows -> {args.out}\n")
    last = row
    print(json.dumps(last))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
