"""Which GPUs a probe must not disturb: GPUs holding other processes' memory, and GPUs of running workers."""

from __future__ import annotations

from collections.abc import Sequence

from amdtop.model import NodeSnapshot, WorkerStatus


def busy_gpus(snap: NodeSnapshot, workers: dict[str, WorkerStatus], gpus: Sequence[int], own_pid: int) -> list[str]:
    """Descriptions of the requested GPUs that are in use, e.g. ``GPU 2: worker llama-a`` or ``GPU 0: pid 4242``."""
    out: list[str] = []
    for g in gpus:
        users = [f"worker {w.name}" for w in workers.values() if g in w.gpus]
        sample = snap.sample(g)
        if sample is not None:
            users += [f"pid {p.pid} {p.name or ''}".strip() for p in sample.processes if p.pid not in (own_pid, 0)]
        if users:
            out.append(f"GPU {g}: " + ", ".join(users))
    return out
