"""Run a probe through any distributed backend (torch in real life, a fake in tests) and build the results."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

from amdtop.model import Topology
from amdtop.probe.arith import algbw_gbps, allreduce_busbw_gbps
from amdtop.probe.flags import degraded_links
from amdtop.probe.model import AllReduceResult, CopyResult, ProbeResults


class DistBackend(Protocol):
    """What the probe needs from a GPU runtime."""

    name: str

    def copy_seconds(self, src: int, dst: int, nbytes: int, iters: int) -> float:
        """Median seconds of one ``nbytes`` copy from GPU ``src`` to GPU ``dst``."""
        ...

    def allreduce_seconds(self, gpus: Sequence[int], sizes: Sequence[int], iters: int) -> dict[int, float]:
        """Seconds of one all-reduce (slowest rank) over one rank per GPU in ``gpus``, per size in bytes."""
        ...


def copy_pairs(gpus: Sequence[int]) -> list[tuple[int, int]]:
    """Directed pairs to copy between: every ordered pair, or the GPU with itself when there is only one."""
    if len(gpus) == 1:
        return [(gpus[0], gpus[0])]
    return [(a, b) for a in gpus for b in gpus if a != b]


def probe_groups(gpus: Sequence[int], workers: Mapping[str, Sequence[int]]) -> list[tuple[str, tuple[int, ...]]]:
    """All-reduce groups: each worker's TP group (its GPUs inside ``gpus``), then ``all``; duplicates dropped."""
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[str, tuple[int, ...]]] = []
    for name, group in [*workers.items(), ("all", tuple(gpus))]:
        g = tuple(x for x in group if x in gpus)
        if g and g not in seen:
            seen.add(g)
            out.append((name, g))
    return out


def run_probe(
    dist: DistBackend,
    topology: Topology,
    gpus: Sequence[int],
    sizes: Sequence[int],
    *,
    workers: Mapping[str, Sequence[int]] | None = None,
    iters: int = 10,
    copy_size: int | None = None,
) -> ProbeResults:
    """Measure copies between every pair of ``gpus`` and all-reduce per group and size; flag slow links."""
    csize = copy_size or max(sizes)
    copies = tuple(
        CopyResult(src, dst, csize, dist.copy_seconds(src, dst, csize, iters)) for src, dst in copy_pairs(gpus)
    )
    reductions: list[AllReduceResult] = []
    for name, group in probe_groups(gpus, workers or {}):
        times = dist.allreduce_seconds(group, sizes, iters)
        for size in sizes:
            sec = times[size]
            reductions.append(
                AllReduceResult(
                    name, group, size, sec, algbw_gbps(size, sec), allreduce_busbw_gbps(size, sec, len(group))
                )
            )
    partial = ProbeResults(time.time(), socket.gethostname(), tuple(gpus), copies, tuple(reductions), runner=dist.name)
    flags = tuple(degraded_links(partial, topology))
    return ProbeResults(partial.timestamp, partial.hostname, partial.gpus, copies, tuple(reductions), flags, dist.name)
