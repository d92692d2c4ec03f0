"""``amdtop snapshot`` and ``amdtop topo``."""

from __future__ import annotations

import argparse
import math
import socket
import time
from typing import Any

from amdtop import runtime
from amdtop.cli.common import node_spec, open_from_args, print_json
from amdtop.cli.served import first_frame, frames_over, serve_of
from amdtop.logread.incidents.model import incident_json
from amdtop.model import NodeSnapshot
from amdtop.pcibus import GpusFailedInit, MissingGpu
from amdtop.pipeline import NodeFrame
from amdtop.report import frame_json, snapshot_json
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
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds; e.g. 10")
    if value < 0 or value > 3600:
        raise argparse.ArgumentTypeError("must be between 0 and 3600 seconds")
    return value


def sample_frame(args: argparse.Namespace) -> NodeFrame:
    """One frame of the node pipeline; with ``--window``, the last of the ticks the runtime takes every
    ``--interval`` over it (the imbalance window is the whole of ``--window``)."""
    window = float(args.window)
    client = serve_of(args)
    if client is not None:  # the serve's frames: no second poller of the node
        try:
            return frames_over(client, window) if window else first_frame(client)
        finally:
            client.close()
    service = runtime.open(node_spec(args), window_s=window)
    try:
        return service.runtime.run_window(window)
    finally:
        service.shutdown()


def _take(args: argparse.Namespace) -> NodeSnapshot:
    backend = open_from_args(args)
    try:
        return backend.sample()
    finally:
        backend.close()


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "N/A" if value is None else f"{value:.{digits}f}{unit}"


def render_snapshot(snap: NodeSnapshot, missing: tuple[MissingGpu, ...] = ()) -> str:
    """A compact human table of one snapshot (the header names GPUs the bus holds and the backend does not show)."""
    head = f"{snap.hostname}  backend={snap.backend}  gpus={len(snap.gpus)}"
    if missing:
        head += f"  missing={len(missing)}: {', '.join(m.bdf for m in missing)}"
    lines = [head]
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


def failed_node_json(exc: GpusFailedInit) -> dict[str, Any]:
    """The ``snapshot --json`` document of a node whose GPUs are all on the bus and none came up: no GPU to sample,
    every accelerator under ``missing_gpus`` (cli-contract.md) and the verdict under ``incidents``."""
    return {
        "backend": None,
        "hostname": socket.gethostname(),
        "timestamp": time.time(),
        "gpus": [],
        "links": [],
        "numa_nodes": [],
        "workers": [],
        "flags": [],
        "missing_gpus": [m.json() for m in exc.missing],
        "incidents": [incident_json(exc.incident)],
    }


def render_failed_node(exc: GpusFailedInit) -> str:
    """The human snapshot of such a node: the header names the missing GPUs, then the verdict."""
    bdfs = ", ".join(m.bdf for m in exc.missing)
    head = f"{socket.gethostname()}  backend=none  gpus=0  missing={len(exc.missing)}: {bdfs}"
    i = exc.incident
    return f"{head}\n!! {i.kind}: {i.summary}; fix: {i.fix}\n"


def run_snapshot(args: argparse.Namespace) -> int:
    """Print one frame of the node (with every flag and the discovered vLLM servers)."""
    try:
        frame = sample_frame(args)
    except GpusFailedInit as exc:
        # the node's state, not a failure of the command: its GPUs are listed as missing, with the kernel's lines
        if args.json:
            print_json(failed_node_json(exc))
        else:
            print(render_failed_node(exc), end="")
        return 0
    if args.json:
        print_json(frame_json(frame))
    else:
        text = render_snapshot(frame.snapshot, () if frame.kernel_log is None else frame.kernel_log.missing_gpus)
        extra = [f for f in frame.flags if f not in frame.snapshot.flags]
        text += "".join(f"! {f.kind.value}: {f.message}\n" for f in extra)
        text += "".join(
            f"!! {i.kind}{' (history)' if i.historic else ''}: {i.summary}; fix: {i.fix}\n" for i in frame.incidents
        )
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
