"""Which GPUs a probe must not disturb: GPUs holding other processes' memory, and GPUs of running workers."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path

from amdtop.model import NodeSnapshot, Topology, WorkerState, WorkerStatus


def worker_groups(config: Path, state_dir: Path, topology: Topology) -> dict[str, WorkerStatus]:
    """amdtop's own workers that are not stopped, by name (empty without a profile file or supervisor)."""
    if not config.exists():
        return {}
    try:
        sup_mod = importlib.import_module("amdtop.supervisor")
        sup = sup_mod.Supervisor(config, state_dir, topology=topology, readonly=True)
        statuses: list[WorkerStatus] = sup.status()
    except Exception:  # a broken profile file must not keep the probe from running; busy GPUs still show below
        return {}
    return {w.name: w for w in statuses if w.state not in (WorkerState.STOPPED, WorkerState.CRASHED)}


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
