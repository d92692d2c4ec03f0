"""Per-TP-group views of workers: what the TP analyses (imbalance, placement) judge instead of whole workers.

A ``--data-parallel-size 2 --tensor-parallel-size 4`` worker on GPUs 0-7 is two TP groups (:class:`TpGroupLayout`);
spreading over both NUMA nodes or differing in load between its replicas is how it is meant to run. Each analysis that
assumes "one worker = one TP group" gets one view per group: the worker with the group's GPUs and ranks only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from amdtop.hip_devices import is_partitioned, physical_gpus
from amdtop.layout import TpGroupLayout
from amdtop.model import Flag, Topology, WorkerState, WorkerStatus


def live_groups(workers: Sequence[WorkerStatus], topology: Topology | None = None) -> list[TpGroupLayout]:
    """TP groups of the workers with GPUs that are not stopped, on physical GPUs when ``topology`` is partitioned
    (groups are split on the devices the worker names, then each group's devices are mapped to their GPUs)."""
    out: list[TpGroupLayout] = []
    split = topology is not None and is_partitioned(topology)
    for w in workers:
        if not w.gpus or w.state is WorkerState.STOPPED:
            continue
        for g in w.tp_groups():
            out.append(replace(g, gpus=physical_gpus(topology, g.gpus)) if split and topology else g)
    return out


def group_view(worker: WorkerStatus, group: TpGroupLayout) -> WorkerStatus:
    """``worker`` narrowed to one TP group: its GPUs, its ranks renumbered from 0, named ``worker/dp<d>``."""
    n = len(group.gpus)
    ranks = tuple((r - group.first_rank, pid) for r, pid in worker.rank_pids if 0 <= r - group.first_rank < n)
    return replace(worker, name=group.suffixed, gpus=group.gpus, rank_pids=ranks, layout=None)


def per_group(
    check: Callable[[Topology, Sequence[WorkerStatus]], list[Flag]],
    topology: Topology,
    workers: Sequence[WorkerStatus],
) -> list[Flag]:
    """Run a worker-level TP ``check`` once per TP group; the flags name the worker again (their message names the
    group: ``llama/dp1``)."""
    views: list[WorkerStatus] = []
    owner: dict[str, str] = {}
    for w in workers:
        groups = w.tp_groups()
        if len(groups) <= 1:
            views.append(w)
            continue
        for g in groups:
            views.append(group_view(w, g))
            owner[g.suffixed] = w.name
    return [replace(f, worker=owner.get(f.worker or "", f.worker)) for f in check(topology, views)]
