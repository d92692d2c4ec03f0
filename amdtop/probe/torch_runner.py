"""The probe's GPU work through PyTorch: peer copies in this process, all-reduce with one process per rank.

torch is imported only here and only when a probe runs (the ``probe`` extra); the core stays importable without it.
"""

from __future__ import annotations

import os
import queue as queue_mod
import socket
import statistics
import time
from collections.abc import Sequence
from typing import Any

from amdtop.errors import AmdtopError

_REPS = 5
_WARMUP = 3
_JOIN_TIMEOUT_S = 300.0


class ProbeUnavailable(AmdtopError):
    """PyTorch with GPU support is not installed or sees no GPU."""


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ProbeUnavailable(
            "probe: PyTorch is not installed; install the probe extra: pip install 'amdtop[probe]'"
        ) from None
    if not torch.cuda.is_available():
        raise ProbeUnavailable("probe: PyTorch sees no GPU (torch.cuda.is_available() is False)")
    return torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _allreduce_rank(rank: int, gpus: list[int], sizes: list[int], iters: int, port: int, out: Any) -> None:
    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", gpus[rank])
    torch.cuda.set_device(dev)
    n = len(gpus)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n, device_id=dev)
    try:
        check = torch.ones(1024, device=dev)
        dist.all_reduce(check)
        if float(check[0]) != float(n):
            raise RuntimeError(f"all-reduce gave {float(check[0])}, expected {n}")
        result: dict[int, float] = {}
        for size in sizes:
            buf = torch.rand(size // 4, dtype=torch.float32, device=dev)
            for _ in range(_WARMUP):
                dist.all_reduce(buf)
            reps = []
            for _ in range(_REPS):
                dist.barrier()
                torch.cuda.synchronize(dev)
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_reduce(buf)
                torch.cuda.synchronize(dev)
                el = torch.tensor([(time.perf_counter() - t0) / iters], device=dev, dtype=torch.float64)
                dist.all_reduce(el, op=dist.ReduceOp.MAX)  # the collective is as slow as its slowest rank
                reps.append(float(el))
            result[size] = statistics.median(reps)
            del buf
        if rank == 0:
            out.put(result)
    finally:
        dist.destroy_process_group()


class TorchDist:
    """Peer copies and NCCL/RCCL all-reduce through torch."""

    def __init__(self) -> None:
        """Import torch now.

        Raises:
            ProbeUnavailable: torch is missing or sees no GPU.
        """
        self.torch = _import_torch()
        self.name = f"torch {self.torch.__version__}"

    def copy_seconds(self, src: int, dst: int, nbytes: int, iters: int) -> float:
        """Median seconds of one copy, timed on the host around synchronised batches of ``iters`` copies."""
        torch = self.torch
        a = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device=f"cuda:{src}")
        b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")
        for _ in range(_WARMUP):
            b.copy_(a, non_blocking=True)
        reps = []
        for _ in range(_REPS):
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            t0 = time.perf_counter()
            for _ in range(iters):
                b.copy_(a, non_blocking=True)
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            reps.append((time.perf_counter() - t0) / iters)
        if not torch.equal(a[:4096].cpu(), b[:4096].cpu()):
            raise AmdtopError(f"probe: copy GPU {src} -> GPU {dst} gave wrong bytes")
        del a, b
        torch.cuda.empty_cache()
        return statistics.median(reps)

    def allreduce_seconds(self, gpus: Sequence[int], sizes: Sequence[int], iters: int) -> dict[int, float]:
        """One process per rank (NCCL needs one GPU per rank); rank 0 reports the slowest rank's times."""
        mp = self.torch.multiprocessing.get_context("spawn")
        out = mp.Queue()
        port = _free_port()
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (shared-host safety)
        procs = [
            mp.Process(target=_allreduce_rank, args=(r, list(gpus), list(sizes), iters, port, out), daemon=True)
            for r in range(len(gpus))
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + _JOIN_TIMEOUT_S
        try:
            while True:
                try:
                    result: dict[int, float] = out.get(timeout=1.0)
                    break
                except queue_mod.Empty:
                    failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if failed:
                        raise AmdtopError(
                            f"probe: an all-reduce rank on GPUs {list(gpus)} exited with {failed[0]}"
                        ) from None
                    if time.monotonic() > deadline:
                        raise AmdtopError(f"probe: all-reduce on GPUs {list(gpus)} gave no result in time") from None
        finally:
            for p in procs:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
        return result
