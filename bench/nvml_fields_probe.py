"""Perf-policy field values (one nvmlDeviceGetFieldValues call) against nvmlDeviceGetViolationStatus: same counter?
Units? Cost? Run on an NVIDIA machine under load: ``python3 bench/nvml_fields_probe.py --out probe.json``."""

from __future__ import annotations

import argparse
import json
import statistics
import time

import pynvml  # type: ignore[import-not-found,unused-ignore]

FIELDS = [74, 75, 76, 77, 79, 269, 270, 271]  # PERF_POLICY_POWER/THERMAL/SYNC_BOOST/BOARD_LIMIT/RELIABILITY, reasons


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    rows = []
    for _ in range(8):
        fv = pynvml.nvmlDeviceGetFieldValues(h, FIELDS)
        v = pynvml.nvmlDeviceGetViolationStatus(h, 0)
        rows.append(
            {
                "t": time.time(),
                "fields": [
                    [int(f.fieldId), int(f.nvmlReturn), int(f.valueType), int(f.value.ullVal), int(f.timestamp)]
                    for f in fv
                ],
                "violation_power": [int(v.referenceTime), int(v.violationTime)],
            }
        )
        time.sleep(0.5)
    cpu = []
    for _ in range(200):
        c0 = time.process_time()
        pynvml.nvmlDeviceGetFieldValues(h, FIELDS)
        cpu.append((time.process_time() - c0) * 1e6)
    out = {"rows": rows, "field_values_cpu_us_median": statistics.median(cpu)}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps(rows[0]), json.dumps(rows[-1]), out["field_values_cpu_us_median"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
