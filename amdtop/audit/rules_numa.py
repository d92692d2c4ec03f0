"""NUMA rules: each worker's binding against its GPUs' node, where its memory really is (``numa_maps``), vLLM's own
``--numa-bind`` doing nothing, and the kernel's page balancing."""

from __future__ import annotations

from collections.abc import Iterator

from amdtop.analysis.numa import numa_flags
from amdtop.audit import sources
from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding, Fix, RuleSkipped, Skipped
from amdtop.audit.numa_maps import local_pct
from amdtop.audit.registry import Outcome, rule
from amdtop.cpulist import format_cpulist
from amdtop.hip_devices import group_numa_nodes, physical_worker
from amdtop.model import FlagKind
from amdtop.procinfo import numa_balancing_enabled, read_binding
from amdtop.thresholds import LOCALITY_WARN_PCT
from amdtop.vllm_numa import VLLM_TITLE, uses_vllm_numa_binding


def reference_nodes(ctx: AuditContext, target: AuditTarget) -> set[int]:
    """The NUMA node(s) a worker's memory belongs on: its GPUs' node(s), else the node it is pinned to."""
    nodes = set(group_numa_nodes(ctx.topology, target.gpus)) if target.gpus else set()
    if not nodes and target.numa_node is not None:
        nodes = {target.numa_node}
    return nodes


def _numa_fix(target: AuditTarget) -> Fix:
    if target.profile is not None:
        return Fix("retune", changes=(("numa_node", "auto"),))
    return Fix("none", advice="start the server under numactl --cpunodebind=N --membind=N (N = the GPUs' node)")


@rule("numa_binding", "worker")
def numa_binding(ctx: AuditContext) -> Iterator[Outcome]:
    """CPU/memory binding of each rank against its GPU's node (the same check as the ``numa_mismatch`` flag)."""
    live = [t for t in ctx.targets if t.running and t.status is not None and t.gpus]
    if len(ctx.topology.numa_nodes) < 2:
        raise RuleSkipped(f"{len(ctx.topology.numa_nodes)} NUMA node(s): nothing to bind across")
    if not live:
        raise RuleSkipped("no running worker with GPUs")
    flags = [f for f in ctx.flags or () if f.kind is FlagKind.NUMA_MISMATCH]
    if ctx.flags is None:
        statuses = [physical_worker(t.status, ctx.topology) for t in live if t.status is not None]
        flags = [
            f
            for f in numa_flags(ctx.topology, statuses, ctx.proc_root, balancing=False)
            if f.kind is FlagKind.NUMA_MISMATCH
        ]
    by_name = {t.name: t for t in live}
    for flag in flags:
        target = by_name.get(flag.worker or "")
        if target is None:
            continue
        yield Finding(
            "numa_binding",
            "warn",
            "worker",
            flag.message,
            tuple(f"{k}: {v}" for k, v in flag.extra),
            "a rank that runs or allocates on the other socket pays a cross-socket hop on every host-device copy",
            sources.ROCM_MI300X_SYSTEM,
            _numa_fix(target),
            worker=target.name,
            gpus=target.gpus,
            set_by="profile" if target.profile is not None else "environment",
        )


def worker_locality(ctx: AuditContext, target: AuditTarget) -> tuple[float | None, list[str]]:
    """(share of the worker's resident KiB on its reference node(s), per-rank evidence); RuleSkipped when the
    maps cannot be read or no node is known. Computed once per run (the rule and the report's locality share it)."""
    key = ("locality", target.name)
    found = ctx.memo.get(key)
    if found is None:
        try:
            found = _worker_locality(ctx, target)
        except RuleSkipped as why:
            found = str(why)
        ctx.memo[key] = found
    if isinstance(found, str):
        raise RuleSkipped(found)
    return found  # type: ignore[return-value]


def _worker_locality(ctx: AuditContext, target: AuditTarget) -> tuple[float | None, list[str]]:
    if target.status is not None and target.status.simulated:
        raise RuleSkipped("simulated worker: its memory is on this host, its GPUs on the simulated node")
    nodes = reference_nodes(ctx, target)
    if not nodes:
        raise RuleSkipped("neither its GPUs' nor its pinned NUMA node is known")
    pids = target.rank_or_all_pids
    if not pids:
        raise RuleSkipped("no live process to read")
    total: dict[int, int] = {}
    evidence = []
    for pid in pids:
        per = ctx.numa_kib(pid)
        for n, v in per.items():
            total[n] = total.get(n, 0) + v
        pct = local_pct(per, nodes)
        spread = " ".join(f"N{n}={v // 1024}MiB" for n, v in sorted(per.items()))
        evidence.append(
            f"/proc/{pid}/numa_maps: {spread or 'nothing resident'} ({'-' if pct is None else f'{pct:.1f}'} % local)"
        )
    return local_pct(total, nodes), evidence


def localities(ctx: AuditContext) -> list[tuple[str, float | None]]:
    """Measured locality of every running target (``None`` where it could not be read)."""
    out: list[tuple[str, float | None]] = []
    for t in ctx.targets:
        if not t.running:
            continue
        try:
            pct, _ev = worker_locality(ctx, t)
        except RuleSkipped:
            pct = None
        out.append((t.name, None if pct is None else round(pct, 1)))
    return out


@rule("numa_locality", "worker")
def numa_locality(ctx: AuditContext) -> Iterator[Outcome]:
    """Share of each worker's resident pages on its GPUs' node (``/proc/PID/numa_maps``)."""
    live = [t for t in ctx.targets if t.running]
    if not live:
        raise RuleSkipped("no running worker")
    for target in live:
        try:
            pct, evidence = worker_locality(ctx, target)
        except RuleSkipped as why:
            yield Skipped("numa_locality", str(why), target.name)
            continue
        if pct is None or pct >= LOCALITY_WARN_PCT:
            continue
        nodes = ",".join(map(str, sorted(reference_nodes(ctx, target))))
        yield Finding(
            "numa_locality",
            "warn",
            "worker",
            f"only {pct:.1f} % of its memory is on node {nodes} (its GPUs' node)",
            tuple(evidence),
            "host memory on the far node makes every pinned copy to the GPU cross the socket link",
            sources.ROCM_MI300X_SYSTEM,
            _numa_fix(target),
            worker=target.name,
            gpus=target.gpus,
        )


@rule("numa_bind_no_effect", "worker")
def numa_bind_no_effect(ctx: AuditContext) -> Iterator[Outcome]:
    """vLLM's ``--numa-bind`` given, but its EngineCore and workers run unbound."""
    live = [t for t in ctx.targets if t.running and t.pid]
    if not live:
        raise RuleSkipped("no running worker")
    all_cpus = {c for n in ctx.topology.numa_nodes for c in n.cpus}
    for target in live:
        assert target.pid is not None
        if not uses_vllm_numa_binding(list(ctx.cmdline(target.pid))):
            continue
        engine = [p for p in target.pids if (cmd := ctx.cmdline(p)) and cmd[0].startswith(VLLM_TITLE)]
        if not engine:
            yield Skipped("numa_bind_no_effect", "its VLLM:: processes are not up yet", target.name)
            continue
        unbound = []
        for pid in engine:
            b = read_binding(pid, ctx.proc_root)
            if b is not None and all_cpus and all_cpus <= set(b.cpus) and len(ctx.topology.numa_nodes) > 1:
                unbound.append(
                    f"/proc/{pid}/status: Cpus_allowed_list {format_cpulist(b.cpus)}, "
                    f"Mems_allowed_list {format_cpulist(b.mems)}"
                )
        if not unbound:
            continue
        yield Finding(
            "numa_bind_no_effect",
            "error",
            "worker",
            "--numa-bind given, but vLLM's processes run unbound",
            (f"/proc/{target.pid}/cmdline: --numa-bind", *unbound),
            "vLLM's own binding silently does nothing on some ROCm images (no numactl on PATH, or fork start): the "
            "ranks float across both sockets",
            sources.VLLM_NUMA_BIND_ROCM,
            Fix(
                "none",
                advice="let amdtop pin instead: remove numa-bind from [worker.args] (amdtop then wraps the "
                "launch in numactl) or install numactl in the image",
            ),
            worker=target.name,
            gpus=target.gpus,
            set_by="vllm",
        )


@rule("numa_balancing_on", "node")
def numa_balancing(ctx: AuditContext) -> Iterator[Outcome]:
    """``kernel.numa_balancing`` on: the kernel migrates pinned workers' pages."""
    state = numa_balancing_enabled(ctx.proc_root)
    if state is None:
        raise RuleSkipped(f"{ctx.proc_root}/sys/kernel/numa_balancing: absent (kernel without NUMA balancing)")
    if not state:
        return
    yield Finding(
        "numa_balancing_on",
        "warn",
        "node",
        "kernel NUMA balancing is on",
        (f"{ctx.proc_root}/sys/kernel/numa_balancing: {ctx.read_proc('sys', 'kernel', 'numa_balancing')}",),
        "the kernel unmaps and migrates pages of running workers to sample access: latency spikes and "
        "variability in RCCL performance (RCCL warns at init)",
        sources.ROCM_MI300X_SYSTEM,
        Fix("command", command="sudo sysctl kernel.numa_balancing=0"),
        set_by="node",
    )
