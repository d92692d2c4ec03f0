"""One rule for the rank a message belongs to (warnings, errors, their groups): what its process and device hold.

A line carries ``host:pid:tid [dev]``. The rank is the one the process holds on that device in its first
communicator (a process driving GPUs 0 and 1 holds two ranks: device [0] prints for the rank on device 0); a process
that holds one rank speaks for it whatever its thread prints; otherwise the rank read when the line was parsed stays.
A line from a device the process's single rank does not run on keeps the line-time value (rank or device); a line
of a process that named no rank at all has none (its ``[dev]`` is a device, not a rank).
Applied at report time, so WARNs printed before the process's Init line are attributed too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from amdtop.logread.rccl.report import Message
from amdtop.logread.rccl.state import ProcComm, ProcKey


def attribute(procs: Sequence[ProcComm]) -> Callable[[Message], Message]:
    """A function giving a message the rank its process holds on its printing device (see module doc)."""
    by_dev: dict[tuple[str | None, int | None, int], int] = {}
    by_proc: dict[ProcKey, set[int]] = {}
    first: dict[ProcKey, tuple[int, int | None]] = {}
    for pc in procs:
        own = pc.own_ranks()
        if pc.rank is not None and pc.dev is not None:
            by_dev.setdefault((pc.host, pc.pid, pc.dev), pc.rank)
        if len(own) == 1 and pc.proc not in first:
            first[pc.proc] = (next(iter(own)), pc.dev)
        by_proc.setdefault(pc.proc, set()).update(own)
    single = {proc: first[proc] for proc, ranks in by_proc.items() if proc in first and len(ranks) == 1}

    def rank_of(m: Message) -> Message:
        if m.host is None and m.pid is None:
            return m
        rank = by_dev.get((m.host, m.pid, m.dev)) if m.dev is not None else None
        if rank is None and (m.host, m.pid) in single:
            # one rank in the process: its own, unless the line comes from another device than the rank's
            r, dev = single[(m.host, m.pid)]
            if m.dev is None or dev is None or dev == m.dev:
                rank = r
        if rank is None and m.rank is not None and m.rank == m.dev and (m.host, m.pid) not in by_proc:
            # the line-time value was the ``[dev]`` of the head (no line of this process names a rank): a device is
            # not a rank (a NET/IB WARN from device [4] of a 64-rank job is not rank 4), so the rank is unknown
            return replace(m, rank=None)
        if rank is None or rank == m.rank:
            return m
        return replace(m, rank=rank)

    return rank_of
