"""Parse rate of the RCCL/NCCL log parser on a generated 1M-line log, next to ``grep -c 'NCCL INFO'`` on the same file.

Usage: .venv/bin/python bench/parse_rate.py [--lines 1000000] [--runs 5]
The log mixes 8-rank RCCL inits (16 channels, one distinct commId per init, an error block every 50 inits) with
vLLM INFO lines, so both the regex path and the cheap-prefix path are exercised.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amdtop.rccl.parser import parse_files
from tests.fixtures.rccl.make_logs import rccl_rank_lines


def generate(path: Path, n: int) -> None:
    lines: list[str] = []
    k = 0
    while len(lines) < n:
        for r in range(8):
            lines += rccl_rank_lines(r, 8, nchannels=16, comm_id=f"0x{k:016x}", errors=(k % 50 == 0 and r == 3))
        lines += [
            f"INFO 07-20 17:27:{k % 60:02d} metrics.py:351] Avg prompt throughput: 0.0 tokens/s" for _ in range(100)
        ]
        k += 1
    path.write_text("\n".join(lines[:n]) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    grep = shutil.which("grep")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        generate(log, args.lines)
        parse_s, grep_s, cpu_s = [], [], []
        for _ in range(args.runs):
            t, c = time.perf_counter(), time.process_time()
            rep = parse_files([log])
            parse_s.append(time.perf_counter() - t)
            cpu_s.append(time.process_time() - c)
            if grep:
                t = time.perf_counter()
                subprocess.run([grep, "-c", "NCCL INFO", str(log)], check=True, capture_output=True)
                grep_s.append(time.perf_counter() - t)
        size = log.stat().st_size
    med = statistics.median(parse_s)
    result = {
        "lines": rep.lines,
        "bytes": size,
        "comms": len(rep.comms),
        "runs": args.runs,
        "parse_median_s": round(med, 3),
        "parse_lines_per_s": round(rep.lines / med),
        "parse_cpu_median_s": round(statistics.median(cpu_s), 3),
        "parse_lines_per_cpu_s": round(rep.lines / statistics.median(cpu_s)),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "grep_median_s": round(statistics.median(grep_s), 4) if grep_s else None,
        "grep_lines_per_s": round(rep.lines / statistics.median(grep_s)) if grep_s else None,
    }
    if grep_s:
        result["parse_over_grep_time"] = round(med / statistics.median(grep_s), 1)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
