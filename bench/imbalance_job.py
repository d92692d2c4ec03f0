"""A 2+-rank torch NCCL job for the real-GPU tp_imbalance check, run as an amdtop worker command.

Phase 1: rank 0 multiplies matrices flat out while the other ranks mostly sleep (util spread far over 15 %).
Phase 2: every rank works flat out (the spread closes). One all-reduce at the start and end creates and checks the
NCCL communicator so its NCCL_DEBUG log can be parsed. Accepts and ignores the vllm-serve flags amdtop appends.
"""

from __future__ import annotations

import argparse
import os
import time


def rank_main(rank: int, world: int, phase1_s: float, phase2_s: float, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device(f"cuda:{rank}"))
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < phase1_s + phase2_s:
        heavy = rank == 0 or time.time() - t0 >= phase1_s
        a @ a
        torch.cuda.synchronize()
        if not heavy:
            time.sleep(0.05)  # ~1 ms of work per 50 ms: this rank's GPU is mostly idle
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"rank {rank} done, all-reduce {x[0].item()}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensor-parallel-size", type=int, default=2)
    ap.add_argument("--phase1", type=float, default=30.0)
    ap.add_argument("--phase2", type=float, default=30.0)
    ap.add_argument("--master-port", type=int, default=29533)
    args, _ignored = ap.parse_known_args()
    import torch.multiprocessing as mp

    world = args.tensor_parallel_size
    mp.spawn(rank_main, args=(world, args.phase1, args.phase2, args.master_port), nprocs=world, join=True)


if __name__ == "__main__":
    main()
