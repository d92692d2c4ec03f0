"""``amdtop probe``: measure GPU-to-GPU copy and all-reduce bandwidth, flag degraded links, cache the results."""

from __future__ import annotations

import argparse
import os
from typing import Any

from amdtop import runtime
from amdtop.cli.common import node_spec, print_json
from amdtop.cli.served import first_frame, serve_of
from amdtop.cpulist import parse_cpulist
from amdtop.errors import InputError
from amdtop.model import NodeSnapshot, WorkerState
from amdtop.probe.arith import format_size, parse_size
from amdtop.probe.guard import busy_gpus
from amdtop.probe.model import ProbeResults, results_json
from amdtop.serve.client import RemoteService
from amdtop.service.api import NodeService

DEFAULT_SIZES = "1M,16M,256M,1G"
MAX_SIZE = 8 * 1024**3


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``probe`` command."""
    p = sub.add_parser("probe", parents=[parent], help="measure p2p copy and all-reduce bandwidth between GPUs")
    p.add_argument("--gpus", default=None, help="GPUs to probe, e.g. 0-3 or 0,2 (default all)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help=f"all-reduce sizes, e.g. {DEFAULT_SIZES}")
    p.add_argument("--copy-size", default=None, help="bytes per p2p copy (default the largest size)")
    p.add_argument("--iters", type=int, default=10, help="operations per timed batch (default 10)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--force", action="store_true", help="probe GPUs that running processes use")
    p.set_defaults(func=run_probe_cmd)


def _parse_sizes(text: str, flag: str = "--sizes") -> list[int]:
    try:
        sizes = sorted({parse_size(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not a list of sizes; use e.g. {DEFAULT_SIZES}") from None
    if not sizes or sizes[-1] > MAX_SIZE or any(s % 4 for s in sizes):
        raise InputError(f"{flag}: {text!r}: give sizes that are multiples of 4 bytes, up to 8G; e.g. {DEFAULT_SIZES}")
    return sizes


def _parse_gpus(text: str | None, snap: NodeSnapshot) -> list[int]:
    known = [g.index for g in snap.topology.gpus]
    if text is None:
        return known
    try:
        gpus = list(parse_cpulist(text))
    except ValueError:
        raise InputError(f"--gpus: {text!r} is not a GPU list; use e.g. 0-3 or 0,2") from None
    unknown = [g for g in gpus if g not in known]
    if not gpus or unknown:
        raise InputError(f"--gpus: GPU {unknown[0] if unknown else text} does not exist; this node has GPUs {known}")
    return gpus


def render(res: ProbeResults) -> str:
    """Human table of a probe run."""
    lines = [f"probe on {res.hostname} ({res.runner}), GPUs {list(res.gpus)}", "copies (GB/s):"]
    for c in res.copies:
        kind = "local" if c.src == c.dst else "p2p"
        lines.append(f"  GPU {c.src} -> GPU {c.dst}  {kind:<5} {format_size(c.size_bytes):>5}  {c.gbps:8.1f}")
    lines.append("all-reduce (GB/s):")
    for r in res.allreduce:
        gpus = ",".join(map(str, r.gpus))
        lines.append(
            f"  {r.group:<12} [{gpus}] {format_size(r.size_bytes):>5}  algbw {r.algbw_gbps:8.1f}  busbw {r.busbw_gbps:8.1f}"
        )
    for f in res.flags:
        lines.append(f"! {f.kind.value}: {f.message}")
    return "\n".join(lines) + "\n"


def run_probe_cmd(args: argparse.Namespace) -> int:
    """Validate, refuse busy GPUs unless forced, measure, cache and print."""
    sizes = _parse_sizes(args.sizes)
    copy_size = _parse_sizes(args.copy_size, "--copy-size")[0] if args.copy_size else None
    if args.iters < 1:
        raise InputError("--iters: must be at least 1")
    # The node service measures (the serve's process when one runs for the state dir, else this one's): it caches
    # the results in the state dir and every view shows them. Its newest frame (one tick here) guards busy GPUs.
    client = serve_of(args)
    local = None if client is not None else runtime.open(node_spec(args), follow_logs=False, kernel=False)
    try:
        if client is not None:
            frame = first_frame(client)
            service: NodeService = RemoteService(client)
        else:
            assert local is not None
            frame, service = local.runtime.tick(), local
        snap = frame.snapshot
        if not snap.topology.gpus:  # --backend none, or a node whose GPUs are all gone
            raise InputError(
                f"probe: backend {snap.backend} lists no GPU to measure; pick a GPU backend with --backend"
            )
        gpus = _parse_gpus(args.gpus, snap)
        workers = {w.name: w for w in frame.workers if w.state not in (WorkerState.STOPPED, WorkerState.CRASHED)}
        busy = busy_gpus(snap, workers, gpus, own_pid=os.getpid())
        if busy and not args.force:
            raise InputError(f"--gpus: GPUs in use ({busy}); stop those workers or pass --force")
        res = service.probe_links(tuple(gpus), tuple(sizes), args.iters, copy_size)
    finally:
        if client is not None:
            client.close()
        if local is not None:
            local.shutdown()
    if args.json:
        print_json(results_json(res))
    else:
        print(render(res), end="")
    return 0
