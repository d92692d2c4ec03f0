"""Demo mode: generated profiles whose workers run the simulated OpenAI server, and their load fed to the sim node."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from amdtop.errors import InputError
from amdtop.hip_devices import device_indices, hip_devices, is_partitioned
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.private_files import make_private_dirs, write_private
from amdtop.supervisor.launchspec import HOST_NODES, command_path, host_numa_nodes
from amdtop.supervisor.profiles import Profile, resolve_numa
from amdtop.telemetry.sim import PARTITION_ENV, GpuDemand, SimBackend

DEMO_FILE = "demo-profiles.toml"
P2P_OFF = ("qwen-32b",)
"""Demo workers that run with NCCL_P2P_DISABLE=1, so the demo shows what a transport fallback looks like."""

# (name, served model, gpus, capacity, tokens/s per sequence, TTFT ms)
_DEMO_WORKERS = (
    ("llama-70b", "meta-llama/Llama-3.1-70B-Instruct", (0, 1, 2, 3), 64, 35.0, 180),
    ("qwen-32b", "Qwen/Qwen2.5-32B-Instruct", (4, 5), 48, 55.0, 120),
    ("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.3", (6,), 32, 90.0, 60),
)


# A data/expert-parallel MoE deployment on all 8 GPUs: DP=2 x TP=4 (two TP groups, 0-3 and 4-7, one per NUMA node),
# off the default demo (it takes every GPU): AMDTOP_DEMO_LAYOUT=dp amdtop --demo.
_DP_DEMO_WORKERS = (("deepseek-moe", "deepseek-ai/DeepSeek-V2-Lite-Chat", (0, 1, 2, 3, 4, 5, 6, 7), 64, 40.0, 150),)
DP_DEMO_ARGS = {"deepseek-moe": "data-parallel-size = 2\nenable-expert-parallel = true\nnuma-bind = true\n"}
"""Extra ``[worker.args]`` lines of the DP demo (``numa-bind``: vLLM pins each rank to its own GPU's node)."""
# An SGLang server beside the default three on the GPU they leave free, off the default demo (a fourth row in the
# Workers pane): AMDTOP_DEMO_LAYOUT=sglang amdtop --demo. It runs the simulated server in SGLang's flavour (its metric
# names, routes and process titles: amdtop.simserver.sglang_flavour).
_SGLANG_DEMO_WORKERS = (("sglang-qwen", "Qwen/Qwen2.5-7B-Instruct", (7,), 32, 80.0, 70),)
DEMO_LAYOUT_ENV = "AMDTOP_DEMO_LAYOUT"
"""``dp`` picks the data-parallel demo, ``sglang`` the default one plus an SGLang worker (each its own profile
file), anything else the default one."""


def demo_layout(env: Mapping[str, str]) -> str:
    """``dp``, ``sglang`` or ``default`` from :data:`DEMO_LAYOUT_ENV`."""
    value = env.get(DEMO_LAYOUT_ENV, "").strip().lower()
    return value if value in ("dp", "sglang") else "default"


def _sglang_worker_text(
    name: str, model: str, gpus: tuple[int, ...], port: int, cap: int, tps: float, ttft: int
) -> str:
    cmd = ", ".join(f'"{c}"' for c in (sys.executable, "-m", "amdtop.simserver", "--flavour", "sglang"))
    return (
        f'\n[[worker]]\nname = "{name}"\nengine = "sglang"\nmodel = "{model}"\ngpus = {list(gpus)}\n'
        f'numa_node = "auto"\nport = {port}\ncommand = [{cmd}]\n'
        f"[worker.args]\nmax-running-requests = {cap * 2}\nmem-fraction-static = 0.85\n"
        f"capacity = {cap}\ntokens-per-s = {tps}\nttft-ms = {ttft}\nbackground-load = {int(cap * 0.8)}\n"
    )


def demo_profiles_text(topology: Topology, port_base: int, layout: str = "default") -> str:
    """TOML text of the demo profiles (GPUs that the topology lacks are left out); ``layout="dp"``: the DP=2 x TP=4
    MoE worker on all 8 GPUs instead of the default three workers."""
    known = set(device_indices(topology))  # HIP devices: partitions on a partitioned node
    parts = ["# amdtop demo workers: simulated OpenAI servers (python -m amdtop.simserver). Edit freely.\n"]
    modes = {f"{g.compute_partition}/{g.memory_partition}" for g in topology.gpus if g.partitions}
    # The simulated servers print RCCL bus ids of the devices they are given: on a partitioned node those are
    # partitions, so each server is told the node's mode.
    mode_env = f'{PARTITION_ENV} = "{next(iter(modes))}"\n' if len(modes) == 1 else ""
    workers: tuple[tuple[str, str, tuple[int, ...], int, float, int], ...] = (
        _DP_DEMO_WORKERS if layout == "dp" else _DEMO_WORKERS + (_SGLANG_DEMO_WORKERS if layout == "sglang" else ())
    )
    for i, (name, model, gpus, cap, tps, ttft) in enumerate(workers):
        if (name, model, gpus, cap, tps, ttft) in _SGLANG_DEMO_WORKERS:
            if set(gpus) <= known:
                parts.append(_sglang_worker_text(name, model, gpus, port_base + i, cap, tps, ttft))
            continue
        if not set(gpus) <= known:
            continue
        cmd = ", ".join(f'"{c}"' for c in (sys.executable, "-m", "amdtop.simserver"))
        parts.append(
            f'\n[[worker]]\nname = "{name}"\nmodel = "{model}"\ngpus = {list(gpus)}\nnuma_node = "auto"\n'
            f"port = {port_base + i}\ncommand = [{cmd}]\n"
            f"[worker.args]\nmax-num-seqs = {cap * 2}\ngpu-memory-utilization = 0.9\n"
            f"capacity = {cap}\ntokens-per-s = {tps}\nttft-ms = {ttft}\nbackground-load = {int(cap * 0.8)}\n"
            + DP_DEMO_ARGS.get(name, "")
            +
            # RCCL init output in the log, as NCCL_DEBUG=INFO gives; one group with P2P off shows a transport fallback
            # (SHM/direct between GPUs the topology links by XGMI) in the Logs and TP groups panes.
            '[worker.env]\nNCCL_DEBUG = "INFO"\n'
            + ('NCCL_P2P_DISABLE = "1"\n' if name in P2P_OFF else "")
            # The simulated server serves /sleep and /wake_up only in dev mode, as vLLM does.
            + ('VLLM_SERVER_DEV_MODE = "1"\n' if layout == "dp" else "")
            + mode_env
        )
    return "".join(parts)


def demo_file(topology: Topology, layout: str = "default") -> str:
    """The demo profile file's name: one per partition mode, since ``gpus = [4, 5]`` names GPUs 4 and 5 on an
    unpartitioned node but two partitions of GPU 0 in CPX (and the servers are told the mode in their env); the
    data-parallel demo (see :data:`DEMO_LAYOUT_ENV`) has its own."""
    modes = sorted({f"{g.compute_partition}-{g.memory_partition}".lower() for g in topology.gpus if g.partitions})
    base = DEMO_FILE if not modes else f"demo-profiles-{'+'.join(modes)}.toml"
    return base if layout == "default" else base.replace(".toml", f"-{layout}.toml")


def ensure_demo_profiles(
    state_dir: Path, topology: Topology, *, port_base: int, env: Mapping[str, str] | None = None
) -> Path:
    """Write the demo profile file of ``topology``'s mode and the demo layout into ``state_dir`` unless one is there
    already; returns its path."""
    layout = demo_layout(os.environ if env is None else env)
    path = Path(state_dir) / demo_file(topology, layout)
    if not path.exists():
        make_private_dirs(path.parent)
        write_private(path, demo_profiles_text(topology, port_base, layout))
    return path


def _number(profile: Profile, key: str, default: float) -> float:
    value = profile.arg(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def feed_demand(
    sim: SimBackend,
    profiles: Sequence[Profile],
    statuses: Sequence[WorkerStatus],
    topology: Topology,
    alive: Callable[[int], bool] | None = None,
) -> None:
    """Set the simulated GPUs' demand from the demo workers' state and scraped load; ``alive(pid)`` (the
    supervisor's: the process is in procfs) drops a worker whose process has exited since its status."""
    by_name = {p.name: p for p in profiles}
    for st in statuses:
        profile = by_name.get(st.name)
        if profile is None:
            continue
        if st.pid and alive is not None and not alive(st.pid):
            # The process is gone since this status was taken: a GPU driver frees a process's memory when it
            # exits, so the simulated GPUs do too (fed from the last tick's statuses, they listed a stopped worker's
            # pid with its VRAM, and the launch gate refused its relaunch: "VRAM held by no live process").
            sim.set_demand(st.name, {})
            continue
        mem_frac = _number(
            profile, "mem-fraction-static" if profile.engine == "sglang" else "gpu-memory-utilization", 0.9
        )
        capacity = max(1.0, _number(profile, "capacity", 64))
        per_group: dict[int, float] = {}
        if st.state is WorkerState.ASLEEP:
            # Sleep mode freed the weights (level 1: offloaded to host) and the KV cache: a sliver of VRAM stays.
            util, frac = 0.0, 0.03
        elif st.state is WorkerState.READY:
            running = (st.engine.running if st.engine else None) or 0.0
            util = min(1.0, 0.03 + 0.97 * running / capacity)
            frac = mem_frac
            engines = st.engine.engines if st.engine else ()
            if len(engines) > 1:
                # Each DP replica's GPUs follow their own engine's load.
                for group, eng in zip(st.tp_groups(), engines, strict=False):
                    busy = min(1.0, 0.03 + 0.97 * (eng.running or 0.0) / capacity)
                    per_group.update({g: busy for g in group.gpus})
        elif st.state in (WorkerState.STARTING, WorkerState.STOPPING):
            util, frac = 0.1, mem_frac * 0.5
        else:
            sim.set_demand(st.name, {})
            continue
        if is_partitioned(topology):
            # Workers name HIP devices (partitions): each holds its partition's share of the GPU's memory.
            mem = {
                d.hip_index: next((p.mem_bytes or 0 for p in gi.partitions if p.index == d.partition), 0)
                for d in hip_devices(topology)
                if (gi := topology.gpu(d.gpu)) is not None
            }
            sim.set_device_demand(
                st.name, {h: GpuDemand(util, int(mem[h] * frac * 0.97), st.pid, st.name) for h in st.gpus if h in mem}
            )
            continue
        demand = {}
        for g in st.gpus:
            info = topology.gpu(g)
            total = info.vram_total_bytes if info and info.vram_total_bytes else 0
            demand[g] = GpuDemand(per_group.get(g, util), int(total * frac * 0.97), st.pid, st.name)
        sim.set_demand(st.name, demand)


def demo_pinning(node: int | None, env: Mapping[str, str], node_root: Path = HOST_NODES) -> tuple[int | None, str]:
    """(node to pin a demo worker to, why it runs unpinned): pin where this host allows, else run unpinned.

    The simulated node has NUMA nodes a laptop or container lacks, and numactl is often not installed there; a demo
    that stays stopped for that shows nothing. Real workers never take this path: their launch fails with the reason.
    """
    if node is None:
        return None, ""
    if command_path("numactl", env) is None:
        return None, "numactl is not installed"
    if node not in host_numa_nodes(node_root):
        return None, f"NUMA node {node} is not on this host"
    return node, ""


def demo_pinning_note(
    profiles: Sequence[Profile], topology: Topology, env: Mapping[str, str], node_root: Path = HOST_NODES
) -> str | None:
    """One line saying which demo workers run unpinned and why (``None`` when all are pinned as their profile asks)."""
    why: dict[str, list[str]] = {}
    for p in profiles:
        try:
            node = resolve_numa(p, topology)
        except InputError:  # a profile error is reported by its launch
            continue
        _pinned, reason = demo_pinning(node, env, node_root)
        if reason:
            why.setdefault(reason, []).append(p.name)
    if not why:
        return None
    return "demo workers run unpinned: " + "; ".join(f"{', '.join(names)} ({reason})" for reason, names in why.items())
