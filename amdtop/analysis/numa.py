"""NUMA binding checks: where each worker really runs and allocates, against where its GPUs sit.

A TP rank that runs on CPUs of the other socket, or allocates host memory there, pays a cross-socket hop on every
host-device copy. The binding is read from procfs for every process of the worker (API server, EngineCore, TP workers),
because children can be re-pinned (vLLM ``--numa-bind``) after the launcher's ``numactl``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from amdtop.cpulist import format_cpulist
from amdtop.model import Flag, FlagKind, Topology, WorkerStatus
from amdtop.procinfo import PROC, numa_balancing_enabled, read_binding
from amdtop.vllm_numa import vllm_bound_view


@dataclass(frozen=True, slots=True)
class WorkerBinding:
    """The real binding of one worker, united over its processes."""

    cpus: tuple[int, ...]
    """Union of ``Cpus_allowed_list`` of its processes."""
    mems: tuple[int, ...]
    """Union of ``Mems_allowed_list`` (NUMA nodes) of its processes."""
    per_pid: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()
    """(pid, cpus, mems) of each process read."""
    from_procfs: bool = False
    """True when read from live processes; False when taken from the worker's reported fields."""


@dataclass(frozen=True, slots=True)
class GroupWarning:
    """A TP group placed across a slow boundary (not a :class:`Flag` kind of the contract)."""

    worker: str
    """Worker of the group."""
    gpus: tuple[int, ...]
    """GPUs concerned."""
    reason: str
    """``non_direct_link`` or ``spans_numa_nodes``."""
    message: str
    """One line for humans."""


def worker_binding(worker: WorkerStatus, proc_root: Path = PROC) -> WorkerBinding:
    """Read the binding of every live process of ``worker``; fall back to its reported fields."""
    # A worker bound by vLLM's own --numa-bind pins its GPU workers only: judge those, not the unpinned API server.
    worker = vllm_bound_view(worker, proc_root)
    if worker.simulated:
        return WorkerBinding(tuple(worker.cpu_affinity), tuple(worker.mems_allowed))
    pids = list(dict.fromkeys([*worker.pids, *(pid for _, pid in worker.rank_pids)]))
    if worker.pid is not None and worker.pid not in pids:
        pids.insert(0, worker.pid)
    cpus: set[int] = set()
    mems: set[int] = set()
    per_pid = []
    for pid in pids:
        binding = read_binding(pid, proc_root)
        if binding is None:
            continue
        cpus.update(binding.cpus)
        mems.update(binding.mems)
        per_pid.append((pid, binding.cpus, binding.mems))
    if per_pid:
        return WorkerBinding(tuple(sorted(cpus)), tuple(sorted(mems)), tuple(per_pid), True)
    return WorkerBinding(tuple(worker.cpu_affinity), tuple(worker.mems_allowed))


def _gpu_nodes(topology: Topology, gpus: Sequence[int]) -> set[int]:
    nodes = set()
    for index in gpus:
        info = topology.gpu(index)
        if info is not None and info.numa_node is not None:
            nodes.add(info.numa_node)
    return nodes


def _check(
    topology: Topology, name: str, gpus: Sequence[int], cpus: Sequence[int], mems: Sequence[int], who: str
) -> str | None:
    """Why ``cpus``/``mems`` do not fit ``gpus``' node(s), or ``None`` when they fit (or nothing is known)."""
    nodes = _gpu_nodes(topology, gpus)
    if not nodes or not cpus:
        return None
    local_cpus = {c for node in topology.numa_nodes if node.id in nodes for c in node.cpus}
    all_cpus = {c for node in topology.numa_nodes for c in node.cpus}
    node_list = ",".join(str(n) for n in sorted(nodes))
    multi = len(topology.numa_nodes) > 1
    if (
        multi
        and len(nodes) == 1
        and all_cpus
        and all_cpus <= set(cpus)
        and set(mems) >= {n.id for n in topology.numa_nodes}
    ):
        return f"{who} is unpinned (CPUs {format_cpulist(cpus)}) on a {len(topology.numa_nodes)}-node host; GPUs sit on node {node_list}"
    off_cpus = set(cpus) - local_cpus if local_cpus else set()
    off_mems = set(mems) - nodes
    parts = []
    if off_cpus:
        parts.append(f"runs on CPUs {format_cpulist(off_cpus)} off node {node_list}")
    if off_mems:
        parts.append(f"may allocate on node(s) {format_cpulist(off_mems)}")
    if not parts:
        return None
    return f"{who} " + " and ".join(parts) + f" (GPUs {','.join(map(str, gpus))} on node {node_list})"


def _rank_name(worker: WorkerStatus, rank: int) -> str:
    # Ranks of a data-parallel worker are global (the device's position); name the replica and the TP rank in it.
    lay = worker.layout
    if lay is None or lay.is_plain:
        return f"TP rank {rank}"
    return f"rank {rank} (dp{rank // lay.world_size} tp{rank % lay.tp})"


def numa_flags(
    topology: Topology,
    workers: Sequence[WorkerStatus],
    proc_root: Path = PROC,
    *,
    bindings: Mapping[str, WorkerBinding] | None = None,
    balancing: bool | None = None,
) -> list[Flag]:
    """``numa_mismatch`` flags for ``workers`` and a ``numa_balancing`` warning when the kernel balances pages.

    Args:
        topology: The node's topology (GPU NUMA nodes and node CPUs).
        workers: Workers to check; their processes are read from ``proc_root`` unless ``bindings`` has them.
        proc_root: Root of procfs.
        bindings: Bindings already read this tick, by worker name (the pipeline reads them once per tick).
        balancing: The kernel's NUMA balancing state when the caller read it; ``None`` reads it from ``proc_root``.

    Returns:
        One flag per misplaced worker (or TP rank), plus the balancing warning.
    """
    flags: list[Flag] = []
    if balancing is None:
        balancing = numa_balancing_enabled(proc_root)
    if balancing:
        flags.append(
            Flag(
                FlagKind.NUMA_BALANCING,
                "kernel NUMA balancing is on (/proc/sys/kernel/numa_balancing): pages of pinned workers may migrate; "
                "set it to 0",
            )
        )
    for worker in workers:
        if not worker.gpus:
            continue
        known = None if bindings is None else bindings.get(worker.name)
        binding = known if known is not None else worker_binding(worker, proc_root)
        reasons: list[tuple[str, tuple[int, ...]]] = []
        rank_of = {pid: rank for rank, pid in worker.rank_pids}
        per_rank_checked = False
        for pid, cpus, mems in binding.per_pid:
            rank = rank_of.get(pid)
            if rank is None or rank >= len(worker.gpus):
                continue
            per_rank_checked = True
            why = _check(
                topology, worker.name, (worker.gpus[rank],), cpus, mems, f"{_rank_name(worker, rank)} (pid {pid})"
            )
            if why:
                reasons.append((why, tuple(worker.gpus)))
        if not per_rank_checked:
            # Without per-rank bindings, each TP group (a DP replica) against the worker's binding: a replica on the
            # other socket is a mismatch even when the worker's GPUs together span both nodes.
            groups = worker.tp_groups()
            for g in groups:
                who = worker.name if len(groups) == 1 else g.suffixed
                why = _check(topology, worker.name, g.gpus, binding.cpus, binding.mems, who)
                if why:
                    reasons.append((why, g.gpus))
        for why, gpus in reasons:
            flags.append(
                Flag(
                    FlagKind.NUMA_MISMATCH,
                    why,
                    worker=worker.name,
                    gpus=gpus,
                    extra=(("cpus", format_cpulist(binding.cpus)), ("mems", format_cpulist(binding.mems))),
                )
            )
    return flags


def topology_group_flags(topology: Topology, workers: Sequence[WorkerStatus]) -> list[GroupWarning]:
    """Warnings for TP groups that span a non-direct GPU link or more than one NUMA node."""
    out: list[GroupWarning] = []
    for worker in workers:
        gpus = tuple(worker.gpus)
        slow = []
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                link = topology.link(a, b)
                if link is not None and not link.direct:
                    slow.append(f"{a}-{b} {link.type.value}")
        if slow:
            out.append(
                GroupWarning(worker.name, gpus, "non_direct_link", f"{worker.name}: non-direct links {', '.join(slow)}")
            )
        nodes = _gpu_nodes(topology, gpus)
        if len(nodes) > 1:
            out.append(
                GroupWarning(
                    worker.name,
                    gpus,
                    "spans_numa_nodes",
                    f"{worker.name}: GPUs span NUMA nodes {','.join(map(str, sorted(nodes)))}",
                )
            )
    return out


def tp_placement_flags(topology: Topology, workers: Sequence[WorkerStatus]) -> list[Flag]:
    """The placement warnings as ``tp_placement`` flags (``reason`` says which boundary), for JSON and export."""
    return [
        Flag(FlagKind.TP_PLACEMENT, w.message, worker=w.worker, gpus=w.gpus, extra=(("reason", w.reason),))
        for w in topology_group_flags(topology, workers)
    ]
