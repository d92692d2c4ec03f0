"""A plain torch script measuring what ``amdtop probe`` measures, for the side-by-side check of issue 7.

Copies are timed with CUDA events on the copying stream (amdtop times on the host around synchronised batches);
all-reduce with one process per rank, CUDA events around ``iters`` collectives, the slowest rank's time.

    python3 bench/probe_reference.py --gpus 0 --sizes 1M,16M,256M,1G --json ref.json [--compare amdtop.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MULT = {"K": 1024, "M": 1024**2, "G": 1024**3}


def size(text: str) -> int:
    return int(text[:-1]) * MULT[text[-1]] if text[-1] in MULT else int(text)


def copy_gbps(src: int, dst: int, nbytes: int, iters: int) -> float:
    a = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=f"cuda:{src}")
    b = torch.empty_like(a, device=f"cuda:{dst}")
    with torch.cuda.device(src):
        for _ in range(3):
            b.copy_(a)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                b.copy_(a)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000 / iters)
    return nbytes / statistics.median(times) / 1e9


def ar_rank(rank: int, gpus: list[int], sizes: list[int], iters: int, port: int, path: str) -> None:
    torch.cuda.set_device(gpus[rank])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=len(gpus))
    n = len(gpus)
    out = {}
    for s in sizes:
        x = torch.rand(s // 4, device="cuda")
        for _ in range(3):
            dist.all_reduce(x)
        times = []
        for _ in range(5):
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(x)
            end.record()
            end.synchronize()
            t = torch.tensor([start.elapsed_time(end) / 1000 / iters], device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times.append(float(t))
        sec = statistics.median(times)
        out[s] = {"algbw_gbps": s / sec / 1e9, "busbw_gbps": s / sec / 1e9 * 2 * (n - 1) / n}
    if rank == 0:
        Path(path).write_text(json.dumps(out))
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0")
    ap.add_argument("--sizes", default="1M,16M,256M,1G")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--compare", type=Path, default=None, help="amdtop probe --json output to compare with")
    args = ap.parse_args()
    gpus = [int(g) for g in args.gpus.split(",")]
    sizes = [size(s) for s in args.sizes.split(",")]
    pairs = [(gpus[0], gpus[0])] if len(gpus) == 1 else [(a, b) for a in gpus for b in gpus if a != b]
    copies = {f"{a}->{b}": copy_gbps(a, b, max(sizes), args.iters) for a, b in pairs}
    tmp = str(args.json) + ".ar"
    mp.spawn(ar_rank, args=(gpus, sizes, args.iters, 29533, tmp), nprocs=len(gpus), join=True)
    ar = {int(k): v for k, v in json.loads(Path(tmp).read_text()).items()}
    os.unlink(tmp)
    doc = {"gpus": gpus, "copies_gbps": copies, "allreduce": {str(k): v for k, v in ar.items()}}
    args.json.write_text(json.dumps(doc, indent=1))
    print(f"reference copies GB/s: {copies}")
    for s, v in ar.items():
        print(f"reference all-reduce {s} B: algbw {v['algbw_gbps']:.1f} busbw {v['busbw_gbps']:.1f} GB/s")
    if args.compare:
        am = json.loads(args.compare.read_text())
        print("amdtop / reference:")
        for c in am["copies"]:
            ref = copies.get(f"{c['src']}->{c['dst']}")
            if ref:
                print(
                    f"  copy {c['src']}->{c['dst']}: amdtop {c['gbps']:.1f} ref {ref:.1f} ratio {c['gbps'] / ref:.3f}"
                )
        for r in am["allreduce"]:
            if r["group"] == "all" and r["size_bytes"] in ar:
                ref = ar[r["size_bytes"]]["algbw_gbps"]
                print(
                    f"  all-reduce {r['size_bytes']} B: amdtop algbw {r['algbw_gbps']:.1f} ref {ref:.1f} ratio {r['algbw_gbps'] / ref:.3f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
