"""Rules the launch gate shares with the audit: the state of the target GPUs before a worker starts on them.

In the audit they judge every GPU (or every worker's group); in the gate (``ctx.launching``) only the GPUs of the
worker about to start, and its own processes are never counted against it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from amdtop import sglang_procs
from amdtop.audit import sources
from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding, Fix, RuleSkipped, Skipped
from amdtop.audit.registry import Outcome, rule
from amdtop.health.throttle import LIMIT_REASONS
from amdtop.model import GpuSample
from amdtop.thresholds import GATE_FREE_VRAM_SPREAD_PCT, GATE_IDLE_HOT_C, GATE_ORPHAN_VRAM_BYTES, UTIL_IDLE_PCT
from amdtop.vllm_numa import VLLM_TITLE

GIB = 1024**3


def _scope(ctx: AuditContext) -> list[int]:
    """GPUs to judge: the targets' in the gate, every GPU in the audit."""
    if ctx.launching:
        return sorted({g for t in ctx.targets for g in ctx.physical(t)})
    return [g.index for g in ctx.topology.gpus]


def _samples(ctx: AuditContext) -> dict[int, GpuSample]:
    if ctx.snapshot is None:
        raise RuleSkipped("no GPU sample (backend none)")
    return {s.index: s for s in ctx.snapshot.gpus if not s.lost}


def _owner(ctx: AuditContext, index: int) -> str | None:
    """The target whose GPUs include ``index`` (for the finding's worker field)."""
    return next((t.name for t in ctx.targets if index in ctx.physical(t)), None) if ctx.launching else None


def _own_pids(ctx: AuditContext, target: AuditTarget | None = None) -> set[int]:
    if target is not None:
        return {p for p in (*target.pids, *(pid for _r, pid in target.rank_pids), target.pid or 0) if p}
    return ctx.all_worker_pids()


@rule("vram_orphaned", "gpu", gate=True)
def vram_orphaned(ctx: AuditContext) -> Iterator[Outcome]:
    """VRAM in use that no live process holds (a killed worker's leftovers, vllm-project/vllm#55510)."""
    samples = _samples(ctx)
    for index in _scope(ctx):
        s = samples.get(index)
        if s is None or s.vram_used_bytes is None:
            continue
        live = sum(p.vram_bytes or 0 for p in s.processes if ctx.alive(p.pid))
        dead = [p for p in s.processes if not ctx.alive(p.pid)]
        orphan = s.vram_used_bytes - live
        if orphan <= GATE_ORPHAN_VRAM_BYTES:
            continue
        evidence = [
            f"GPU {index}: {s.vram_used_bytes / GIB:.1f} GiB in use, {live / GIB:.1f} GiB held by live processes"
        ]
        evidence += [
            f"pid {p.pid} ({p.name or '?'}) gone but listed with {(p.vram_bytes or 0) / GIB:.1f} GiB" for p in dead
        ]
        yield Finding(
            "vram_orphaned",
            "error",
            "gpu",
            f"GPU {index}: {orphan / GIB:.1f} GiB of VRAM held by no live process",
            tuple(evidence),
            "a new worker sizes its KV cache from free VRAM: it starts smaller or runs out of memory, and ranks of "
            "one TP group get different budgets",
            sources.VLLM_ORPHANS,
            Fix(
                "command",
                command=f"sudo amd-smi process -G -g {index}  # find the holder; "
                "then stop it, or reset the GPU (amd-smi reset -G -g N) when none is left",
            ),
            worker=_owner(ctx, index),
            gpus=(index,),
            set_by="node",
        )


def _is_vllm(ctx: AuditContext, pid: int, name: str | None) -> str | None:
    cmd = ctx.cmdline(pid) if pid > 0 else ()
    text = " ".join(cmd[:3]) if cmd else (name or "")
    # An SGLang server's processes (its scheduler ranks titled sglang::, its launch_server) hold GPUs the same way.
    if text.startswith((VLLM_TITLE, sglang_procs.TITLE)) or "vllm" in text.lower() or sglang_procs.is_sglang_argv(cmd):
        return text[:80]
    return None


def _port_holders(ctx: AuditContext, port: int) -> list[tuple[int, str]]:
    """(pid, argv) of processes listening on TCP ``port`` (psutil; only the caller's own processes are visible
    without root)."""
    import psutil

    out: list[tuple[int, str]] = []
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return out
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            out.append((c.pid, " ".join(ctx.cmdline(c.pid)[:3])))
    return out


@rule("leftover_vllm", "worker", gate=True)
def leftover_vllm(ctx: AuditContext) -> Iterator[Outcome]:
    """vLLM (or SGLang) processes that are no worker's holding a target's GPUs (or, at launch, its port)."""
    samples = _samples(ctx)
    targets = list(ctx.targets) if ctx.launching else [t for t in ctx.targets if t.gpus]
    if not targets:
        raise RuleSkipped("no worker with GPUs")
    for target in targets:
        own = _own_pids(ctx, target) if ctx.launching else _own_pids(ctx)
        found: list[str] = []
        gpus: list[int] = []
        for index in ctx.physical(target):
            s = samples.get(index)
            for p in s.processes if s else ():
                if p.pid in own or not ctx.alive(p.pid) or p.pid <= 0:
                    continue
                what = _is_vllm(ctx, p.pid, p.name)
                if what:
                    found.append(f"GPU {index}: pid {p.pid} {what} holds {(p.vram_bytes or 0) / GIB:.1f} GiB")
                    gpus.append(index)
        if ctx.launching:
            listed = {int(x.split("pid ")[1].split()[0]) for x in found}
            for line, index in _found_servers_on(ctx, target, own, listed):
                found.append(line)
                gpus.append(index)
        if ctx.launching and target.port:
            for pid, argv in _port_holders(ctx, target.port):
                if pid not in own:
                    found.append(f"port {target.port}: pid {pid} {argv or '?'} listens on it")
        if not found:
            continue
        pids = sorted({int(x.split("pid ")[1].split()[0]) for x in found})
        yield Finding(
            "leftover_vllm",
            "error",
            "worker",
            f"{len(pids)} leftover vLLM process(es) hold {target.name}'s GPUs or port",
            tuple(found),
            "a second server on the same GPUs starts into OOM or splits the GPU; a held port makes the launch fail",
            sources.VLLM_ORPHANS,
            Fix("command", command=f"kill -TERM {' '.join(map(str, pids))}  # after checking they are leftovers"),
            worker=target.name,
            gpus=tuple(sorted(set(gpus))),
            set_by="node",
        )


def _found_servers_on(
    ctx: AuditContext, target: AuditTarget, own: set[int], listed: set[int]
) -> Iterator[tuple[str, int]]:
    """``(line, GPU)`` for each rank of a running server amdtop did not start (vLLM or SGLang, found as the pipeline
    finds them) that sits on one of ``target``'s GPUs, where its GPUs are known (a visibility variable in its
    environment, or the rank in the GPU's process list), and the process lists did not already name it: a backend
    that cannot list processes (another user's, a driver without fdinfo) still sees what runs there."""
    from amdtop.analysis.discover import discover_vllm
    from amdtop.procinfo import read_environ

    wanted = set(ctx.physical(target))
    snap = ctx.snapshot
    on_gpu = {p.pid for s in (snap.gpus if snap else ()) for p in s.processes}
    gpu_pids: dict[int, tuple[int, ...]] = {}
    for s in snap.gpus if snap else ():
        for p in s.processes:
            gpu_pids[p.pid] = (*gpu_pids.get(p.pid, ()), s.index)
    for server in discover_vllm(ctx.proc_root, gpu_pids):
        if own.intersection(server.pids) or listed.intersection(server.pids):
            continue
        known = on_gpu.intersection(server.pids) or any(
            _VISIBLE.intersection(read_environ(pid, ctx.proc_root)) for pid in server.pids
        )
        if not known:
            continue  # its devices are discovery's guess (vLLM on the CPU has none): never a refusal on a guess
        for rank, gpu in enumerate(server.gpus):
            if gpu in wanted:
                pid = dict(server.rank_pids).get(rank, server.pid or 0)
                yield f"GPU {gpu}: pid {pid} rank {rank} of {server.name}, a server started outside amdtop", gpu


_VISIBLE = {"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"}


@rule("free_vram_spread", "worker", gate=True)
def free_vram_spread(ctx: AuditContext) -> Iterator[Outcome]:
    """Free VRAM differing by more than 10 % across a TP group (vLLM sizes every rank's KV cache by the least)."""
    samples = _samples(ctx)
    if not any(len(ctx.physical(t)) > 1 for t in ctx.targets):
        raise RuleSkipped("no TP group of 2 or more GPUs")
    for target in ctx.targets:
        gpus = ctx.physical(target)
        if len(gpus) < 2:
            continue
        free = {}
        for g in gpus:
            s = samples.get(g)
            if s is None or s.vram_used_bytes is None or not s.vram_total_bytes:
                yield Skipped("free_vram_spread", f"GPU {g}: VRAM unknown", target.name)
                break
            free[g] = s.vram_total_bytes - s.vram_used_bytes
        else:
            hi, lo = max(free.values()), min(free.values())
            spread = 100.0 * (hi - lo) / hi if hi > 0 else 0.0
            if spread <= GATE_FREE_VRAM_SPREAD_PCT:
                continue
            yield Finding(
                "free_vram_spread",
                "error",
                "worker",
                f"free VRAM differs by {spread:.0f} % across {target.name}'s GPUs",
                tuple(f"GPU {g}: {v / GIB:.1f} GiB free" for g, v in free.items()),
                "vLLM sizes every rank's KV cache by the GPU with the least free memory: the others' extra memory is "
                "wasted, and something else is using the short one",
                "docs/cli.md (the launch gate)",
                Fix("none", advice="find what holds memory on the GPU with the least free (Processes pane)"),
                worker=target.name,
                gpus=tuple(gpus),
                set_by="node",
            )


def _retired_pages(ctx: AuditContext, bdf: str) -> tuple[int, str] | None:
    dev = ctx.pci_dir(bdf)
    if dev is None:
        return None
    path = os.path.join(dev, "ras", "gpu_vram_bad_pages")
    text = ctx.read_sys(path)
    if text is None:
        return None
    retired = sum(1 for line in text.splitlines() if line.rstrip().endswith(": R"))
    return retired, path


@rule("ecc_uncorrectable", "gpu", gate=True)
def ecc_uncorrectable(ctx: AuditContext) -> Iterator[Outcome]:
    """Uncorrectable ECC errors counted, or VRAM pages retired, on a GPU."""
    samples = _samples(ctx)
    known = 0
    for index in _scope(ctx):
        s, info = samples.get(index), ctx.gpu(index)
        evidence = []
        if s is not None and s.ecc is not None:
            known += 1
            evidence += [
                f"GPU {index} ras {e.block}: {e.uncorrectable} uncorrectable" for e in s.ecc if e.uncorrectable
            ]
        pages = _retired_pages(ctx, info.bdf) if info is not None else None
        if pages is not None:
            known += 1
            if pages[0]:
                evidence.append(f"{pages[1]}: {pages[0]} retired page(s)")
        if not evidence:
            continue
        yield Finding(
            "ecc_uncorrectable",
            "error",
            "gpu",
            f"GPU {index}: uncorrectable ECC errors or retired VRAM pages",
            tuple(evidence),
            "an uncorrectable error kills the process that touches the page; a GPU that keeps retiring pages is "
            "failing and takes its whole TP group down with it",
            sources.AMDGPU_RAS,
            Fix("command", command=f"sudo amd-smi metric -g {index} -E  # then drain the GPU and open an RMA case"),
            worker=_owner(ctx, index),
            gpus=(index,),
            set_by="node",
        )
    if not known:
        raise RuleSkipped("no GPU reports RAS/ECC counts or retired pages")


@rule("partition_mixed", "worker", gate=True)
def partition_mixed(ctx: AuditContext) -> Iterator[Outcome]:
    """Compute or memory partition modes differing across a TP group."""
    if not any(g.compute_partition or g.memory_partition for g in ctx.topology.gpus):
        raise RuleSkipped("no GPU reports partition modes")
    if not any(len(ctx.physical(t)) > 1 for t in ctx.targets):
        raise RuleSkipped("no TP group of 2 or more GPUs")
    for target in ctx.targets:
        modes = {}
        for g in ctx.physical(target):
            info = ctx.gpu(g)
            if info is not None:
                modes[g] = (info.compute_partition, info.memory_partition)
        if len(set(modes.values())) < 2:
            continue
        yield Finding(
            "partition_mixed",
            "error",
            "worker",
            f"partition modes differ across {target.name}'s GPUs",
            tuple(f"GPU {g}: {c or '-'} / {m or '-'}" for g, (c, m) in modes.items()),
            "ranks on partitions of different sizes run at different speeds (CUs, memory bandwidth): the TP group "
            "runs at the pace of the smallest",
            sources.AMDGPU_PARTITIONS,
            Fix("command", command="sudo amd-smi set -g N -C SPX -M NPS1  # one mode for every GPU of the group"),
            worker=target.name,
            gpus=tuple(modes),
            set_by="node",
        )


@rule("gpu_hot_idle", "gpu", gate=True)
def gpu_hot_idle(ctx: AuditContext) -> Iterator[Outcome]:
    """An idle GPU that is hot or throttled for power/thermal limits."""
    samples = _samples(ctx)
    for index in _scope(ctx):
        s = samples.get(index)
        if s is None:
            continue
        busy = (s.util_pct or 0.0) >= UTIL_IDLE_PCT or any(ctx.alive(p.pid) and p.pid > 0 for p in s.processes)
        if busy:
            continue
        reasons = []
        if s.temp_c is not None and s.temp_c >= GATE_IDLE_HOT_C:
            reasons.append(f"{s.temp_c:.0f} °C at idle (>= {GATE_IDLE_HOT_C:.0f})")
        limits = [r for r in s.throttle_active or () if r in LIMIT_REASONS]
        if limits:
            reasons.append(f"throttled at idle: {', '.join(limits)}")
        if not reasons:
            continue
        yield Finding(
            "gpu_hot_idle",
            "error",
            "gpu",
            f"GPU {index} {'; '.join(reasons)}",
            (
                f"GPU {index}: util {s.util_pct} %, temp {s.temp_c} °C, power {s.power_w} W, throttle "
                f"{', '.join(s.throttle_active or ()) or 'none'}",
            ),
            "a GPU that is hot or capped before any work starts will throttle under load and slow its TP group",
            sources.ROCM_MI300X_SYSTEM,
            Fix("command", command=f"sudo amd-smi metric -g {index} -t -p  # check cooling and the power cap"),
            worker=_owner(ctx, index),
            gpus=(index,),
            set_by="node",
        )
