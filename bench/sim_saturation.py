"""Output throughput of the simulated server per concurrency, the numbers behind the knee test's margins.

Usage: python bench/sim_saturation.py [--capacity 3] [--runs 4] [--tokens-per-s 100] [--ttft-ms 10]
Each run ramps C = 1..8 (1 s steps, 8-token prompts and outputs, no refinement) against a fresh server and prints
the output tok/s per step and the knee.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from amdtop.ramp import Ramp, RampConfig
from tests.unit.simproc import simserver

PORT = 18120


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity", type=int, default=3)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--tokens-per-s", type=float, default=100.0)
    ap.add_argument("--ttft-ms", type=float, default=10.0)
    a = ap.parse_args()
    cfg = RampConfig(url=f"http://127.0.0.1:{PORT}", concurrencies=tuple(range(1, 9)), step_seconds=1.0,
                     warmup_seconds=0.3, input_len=8, output_len=8, request_timeout_s=5.0, refine_points=0)  # fmt: skip
    with tempfile.TemporaryDirectory() as state:
        for _ in range(a.runs):
            with simserver(PORT, "--capacity", str(a.capacity), "--tokens-per-s", str(a.tokens_per_s),
                           "--ttft-ms", str(a.ttft_ms)):  # fmt: skip
                doc = asyncio.run(Ramp(cfg, Path(state)).run()).to_json()
            print(f"capacity {a.capacity}: tok/s at C=1..8 {[round(s['output_throughput']) for s in doc['steps']]}, "
                  f"knee {doc['recommended_max_num_seqs']}")  # fmt: skip


if __name__ == "__main__":
    main()
