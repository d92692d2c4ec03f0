"""A small torch.distributed all-reduce with NCCL debug logs, for the log-parser fixtures (issue 5).

Each rank logs to ``<logdir>/<tag>.rank<r>.log`` (``NCCL_DEBUG_FILE``); ``--devices`` says which GPU each rank
takes, so ``--devices 0,0`` asks NCCL for two ranks on one GPU (it refuses: that error log is a fixture too).

    NCCL_DEBUG=INFO python3 bench/nccl_allreduce.py --devices 0,1,2,3 --logdir logs --tag p2p4
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank: int, devices: list[int], logdir: str, tag: str, port: int, numel: int) -> None:
    os.environ["NCCL_DEBUG_FILE"] = str(Path(logdir) / f"{tag}.rank{rank}.log")
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device("cuda", devices[rank])
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=len(devices), device_id=dev)
    x = torch.full((numel,), float(rank + 1), device=dev)
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    n = len(devices)
    expect = float(n * (n + 1) // 2) * n**4
    print(f"rank {rank}: all-reduce value {float(x[0])} expected {expect}", flush=True)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default="0")
    ap.add_argument("--logdir", type=Path, required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--port", type=int, default=29511)
    ap.add_argument("--numel", type=int, default=1 << 24)
    args = ap.parse_args()
    args.logdir.mkdir(parents=True, exist_ok=True)
    devices = [int(d) for d in args.devices.split(",")]
    try:
        mp.spawn(rank_main, args=(devices, str(args.logdir), args.tag, args.port, args.numel), nprocs=len(devices))
    except Exception as exc:
        print(
            f"nccl_allreduce: {args.tag}: failed: {type(exc).__name__}: {str(exc).splitlines()[-1] if str(exc) else ''}"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
