"""``amdtop snapshot`` and ``amdtop topo``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from amdtop.analysis import ImbalanceTracker, discover_vllm, numa_flags, tp_placement_flags
from amdtop.cli.common import open_from_args, print_json
from amdtop.cli.export import readonly_supervisor
from amdtop.model import Flag, NodeSnapshot, WorkerStatus
from amdtop.report import snapshot_json
from amdtop.telemetry.base import TelemetryBackend
from amdtop.topo_text import render_topology


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``snapshot`` and ``topo`` commands."""
    p = sub.add_parser("snapshot", parents=[parent], help="one sample of the node")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "--window",
        type=_window,
        default=0.0,
        metavar="SECONDS",
        help="sample over this many seconds (every --interval) and judge TP imbalance over the window (default 0: one sample)",
    )
    p.set_defaults(func=run_snapshot)
    t = sub.add_parser("topo", parents=[parent], help="the topology matrix")
    fmt = t.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="JSON (gpus, links, numa_nodes)")
    fmt.add_argument("--text", action="store_true", help="text matrix (default)")
    t.set_defaults(func=run_topo)


def _window(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0 or value > 3600:
        raise argparse.ArgumentTypeError("must be between 0 and 3600 seconds")
    return value


def _worker_json(w: WorkerStatus) -> dict[str, Any]:
    return {
        "name": w.name,
        "state": w.state.value,
        "pid": w.pid,
        "pgid": w.pgid,
        "gpus": list(w.gpus),
        "numa_node": w.numa_node,
        "port": w.port,
        "url": w.url,
        "cpu_affinity": list(w.cpu_affinity),
        "mems_allowed": list(w.mems_allowed),
        "log": w.log,
        "restarts": w.restarts,
        "source": w.source,
        "rank_pids": [{"rank": r, "pid": p} for r, p in w.rank_pids],
    }


def _sample_with_flags(args: argparse.Namespace) -> tuple[NodeSnapshot, list[WorkerStatus], list[Flag]]:
    """Sample once (or over ``--window``), discover running vLLM servers, and compute the analysis flags."""
    window = float(getattr(args, "window", 0.0) or 0.0)
    interval = float(getattr(args, "interval", 1.0) or 1.0)
    proc_root = Path("/proc")
    backend = open_from_args(args)
    try:
        tracker = ImbalanceTracker(window_s=window)
        end = time.monotonic() + window
        snap = backend.sample()
        workers = _workers(args, backend, snap, proc_root)
        flags = tracker.update(snap, workers)
        while time.monotonic() < end:
            time.sleep(min(interval, max(0.0, end - time.monotonic())))
            snap = backend.sample()
            flags = tracker.update(snap, workers)
    finally:
        backend.close()
    flags += numa_flags(snap.topology, workers, proc_root)
    flags += tp_placement_flags(snap.topology, workers)
    return snap, workers, flags


def _workers(
    args: argparse.Namespace, backend: TelemetryBackend, snap: NodeSnapshot, proc_root: Path
) -> list[WorkerStatus]:
    """amdtop's own workers (when profiles exist) plus vLLM servers found running that amdtop did not launch."""
    sup = readonly_supervisor(args, backend)
    own: list[WorkerStatus] = []
    if sup is not None:
        try:
            own = [w for w in sup.status() if w.pid]
        finally:
            sup.close()
    # The simulated node has no real processes: discovering host vLLM servers would mix real and fake workers.
    found = [] if backend.name == "sim" else discover_vllm(proc_root, _gpu_pids(snap))
    known = {pid for w in own for pid in (*w.pids, w.pid) if pid}
    return own + [w for w in found if not known.intersection(w.pids)]


def _gpu_pids(snap: NodeSnapshot) -> dict[int, tuple[int, ...]]:
    out: dict[int, tuple[int, ...]] = {}
    for sample in snap.gpus:
        for proc in sample.processes:
            out[proc.pid] = (*out.get(proc.pid, ()), sample.index)
    return out


def _take(args: argparse.Namespace) -> NodeSnapshot:
    backend = open_from_args(args)
    try:
        return backend.sample()
    finally:
        backend.close()


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}{unit}"


def render_snapshot(snap: NodeSnapshot) -> str:
    """A compact human table of one snapshot."""
    lines = [f"{snap.hostname}  backend={snap.backend}  gpus={len(snap.gpus)}"]
    lines.append(f"{'GPU':<4}{'NAME':<24}{'NUMA':<6}{'UTIL':>6}{'VRAM USED/TOTAL':>22}{'POWER':>8}{'TEMP':>7}")
    for info in snap.topology.gpus:
        s = snap.sample(info.index)
        if s is None or s.lost:
            lines.append(f"{info.index:<4}{info.name[:23]:<24}{'-':<6}  LOST {'' if s is None else s.error or ''}")
            continue
        used = None if s.vram_used_bytes is None else s.vram_used_bytes / 1e9
        total = None if s.vram_total_bytes is None else s.vram_total_bytes / 1e9
        vram = f"{_fmt(used, '', 1)}/{_fmt(total, ' GB', 1)}"
        numa = "N/A" if info.numa_node is None else str(info.numa_node)
        lines.append(
            f"{info.index:<4}{info.name[:23]:<24}{numa:<6}{_fmt(s.util_pct, '%'):>6}{vram:>22}"
            f"{_fmt(s.power_w, ' W'):>8}{_fmt(s.temp_c, ' C'):>7}"
        )
    for flag in snap.flags:
        lines.append(f"! {flag.kind.value}: {flag.message}")
    return "\n".join(lines) + "\n"


def run_snapshot(args: argparse.Namespace) -> int:
    """Print one sample of the node (with analysis flags and discovered vLLM servers)."""
    snap, workers, flags = _sample_with_flags(args)
    if args.json:
        print_json(snapshot_json(snap, [_worker_json(w) for w in workers], flags))
    else:
        text = render_snapshot(snap)
        extra = [f for f in flags if f not in snap.flags]
        text += "".join(f"! {f.kind.value}: {f.message}\n" for f in extra)
        print(text, end="")
    return 0


def run_topo(args: argparse.Namespace) -> int:
    """Print the topology matrix."""
    snap = _take(args)
    if args.json:
        doc = snapshot_json(snap, with_metrics=False)
        doc.pop("workers", None)
        print_json(doc)
    else:
        print(render_topology(snap.topology), end="")
    return 0
