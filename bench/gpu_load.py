"""A CUDA process that holds GPU memory and keeps the GPU busy for a while (the "busy" case of the device benches).

    python3 bench/gpu_load.py --gib 8 --n 8192 --seconds 400            # a torch job: ~96 % SM on an H200
    python3 bench/gpu_load.py --gib 1 --n 2048 --seconds 400 --pause 0.05   # a second, light process
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=8, help="GPU memory to hold")
    ap.add_argument("--n", type=int, default=8192, help="matrix size of the matmuls")
    ap.add_argument("--seconds", type=float, default=400.0)
    ap.add_argument("--pause", type=float, default=0.0, help="sleep between matmuls (a light process)")
    a = ap.parse_args()
    held = torch.empty(a.gib << 30, dtype=torch.uint8, device="cuda")
    m = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    end = time.time() + a.seconds
    while time.time() < end:
        m @ m
        torch.cuda.synchronize()
        if a.pause:
            time.sleep(a.pause)
    del held


if __name__ == "__main__":
    main()
