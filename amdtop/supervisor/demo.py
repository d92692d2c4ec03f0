"""Demo mode: generated profiles whose workers run the simulated OpenAI server, and their load fed to the sim node."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
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


def demo_profiles_text(topology: Topology, port_base: int) -> str:
    """TOML text of the demo profiles (GPUs that the topology lacks are left out)."""
    known = set(device_indices(topology))  # HIP devices: partitions on a partitioned node
    parts = ["# amdtop demo workers: simulated OpenAI servers (python -m amdtop.simserver). Edit freely.\n"]
    modes = {f"{g.compute_partition}/{g.memory_partition}" for g in topology.gpus if g.partitions}
    # The simulated servers print RCCL bus ids of the devices they are given: on a partitioned node those are
    # partitions, so each server is told the node's mode.
    mode_env = f'{PARTITION_ENV} = "{next(iter(modes))}"\n' if len(modes) == 1 else ""
    for i, (name, model, gpus, cap, tps, ttft) in enumerate(_DEMO_WORKERS):
        if not set(gpus) <= known:
            continue
        cmd = ", ".join(f'"{c}"' for c in (sys.executable, "-m", "amdtop.simserver"))
        parts.append(
            f'\n[[worker]]\nname = "{name}"\nmodel = "{model}"\ngpus = {list(gpus)}\nnuma_node = "auto"\n'
            f"port = {port_base + i}\ncommand = [{cmd}]\n"
            f"[worker.args]\nmax-num-seqs = {cap * 2}\ngpu-memory-utilization = 0.9\n"
            f"capacity = {cap}\ntokens-per-s = {tps}\nttft-ms = {ttft}\nbackground-load = {int(cap * 0.8)}\n"
            # RCCL init output in the log, as NCCL_DEBUG=INFO gives; one group with P2P off shows a transport fallback
            # (SHM/direct between GPUs the topology links by XGMI) in the Logs and TP groups panes.
            f'[worker.env]\nNCCL_DEBUG = "INFO"\n' + ('NCCL_P2P_DISABLE = "1"\n' if name in P2P_OFF else "") + mode_env
        )
    return "".join(parts)


def demo_file(topology: Topology) -> str:
    """The demo profile file's name: one per partition mode, since ``gpus = [4, 5]`` names GPUs 4 and 5 on an
    unpartitioned node but two partitions of GPU 0 in CPX (and the servers are told the mode in their env)."""
    modes = sorted({f"{g.compute_partition}-{g.memory_partition}".lower() for g in topology.gpus if g.partitions})
    return DEMO_FILE if not modes else f"demo-profiles-{'+'.join(modes)}.toml"


def ensure_demo_profiles(state_dir: Path, topology: Topology, *, port_base: int) -> Path:
    """Write the demo profile file of ``topology``'s mode into ``state_dir`` unless one is there already; its path."""
    path = Path(state_dir) / demo_file(topology)
    if not path.exists():
        make_private_dirs(path.parent)
        write_private(path, demo_profiles_text(topology, port_base))
    return path


def _number(profile: Profile, key: str, default: float) -> float:
    value = profile.arg(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def feed_demand(
    sim: SimBackend, profiles: Sequence[Profile], statuses: Sequence[WorkerStatus], topology: Topology
) -> None:
    """Set the simulated GPUs' demand from the demo workers' state and scraped load."""
    by_name = {p.name: p for p in profiles}
    for st in statuses:
        profile = by_name.get(st.name)
        if profile is None:
            continue
        mem_frac = _number(profile, "gpu-memory-utilization", 0.9)
        capacity = max(1.0, _number(profile, "capacity", 64))
        if st.state is WorkerState.READY:
            running = (st.engine.running if st.engine else None) or 0.0
            util = min(1.0, 0.03 + 0.97 * running / capacity)
            frac = mem_frac
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
            demand[g] = GpuDemand(util, int(total * frac * 0.97), st.pid, st.name)
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
