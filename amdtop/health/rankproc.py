"""The thin ``/proc`` reader behind the stall verdicts: one ``stat`` read per TP rank process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from amdtop.model import RankSample
from amdtop.procinfo import PROC, read_proc_bytes
from amdtop.thresholds import BLOCKED_RECHECK_S

CLK_TCK = os.sysconf("SC_CLK_TCK")
GONE = "gone"


def read_rank(
    rank: int,
    pid: int,
    start_ticks: int | None = None,
    *,
    proc: Path = PROC,
    clock: Callable[[], float] = time.monotonic,
) -> RankSample:
    """Rank ``rank``'s process ``pid`` now: its state letter, CPU time and threads; ``gone`` when the process no longer
    exists or (``start_ticks`` given) the pid now names another process."""
    at = clock()
    try:
        text = read_proc_bytes(pid, "stat", proc)
    except OSError:
        return RankSample(rank, pid, GONE, at=at)
    # The command name may hold spaces and parentheses: the fields start after the last ')'.
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        state = fields[0].decode("ascii", "replace")
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        threads = int(fields[17])
        start = int(fields[19])
    except (IndexError, ValueError):
        return RankSample(rank, pid, GONE, at=at)
    if start_ticks is not None and start != start_ticks:
        return RankSample(rank, pid, GONE, at=at)  # the pid was reused: the rank's own process is gone
    exit_status = None
    if state == "Z" and len(fields) > 49:
        exit_status = int(fields[49])  # field 52: the wait status its parent has not collected yet
    return RankSample(rank, pid, state, cpu, threads, at, exit_status)


def sample_of(rank: int, pid: int, state: str, cpu_ticks: int, threads: int, at: float) -> RankSample:
    """A rank's sample from a ``stat`` line already read (the supervisor's process table): no second read."""
    return RankSample(rank, pid, state, cpu_ticks / CLK_TCK, threads, at)


def read_ranks(
    ranks: Iterable[tuple[int, int]], *, proc: Path = PROC, clock: Callable[[], float] = time.monotonic
) -> tuple[RankSample, ...]:
    """:func:`read_rank` for each ``(rank, pid)``, in rank order."""
    return tuple(read_rank(r, p, proc=proc, clock=clock) for r, p in sorted(ranks))


def settle_blocked(
    samples: tuple[RankSample, ...],
    *,
    starts: Mapping[int, int] | None = None,
    proc: Path = PROC,
    wait_s: float = BLOCKED_RECHECK_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[RankSample, ...]:
    """``samples`` with each rank read in state ``D`` read once more ``wait_s`` later (one wait for all of them): a
    rank is ``rank_blocked`` on two looks, not one. A healthy process sleeps in D for milliseconds at a time (paging
    in, one driver call); a blocked one stays. No rank in D: no wait, no read. ``starts`` (rank -> start ticks, where
    the first look checked them) keeps that check at the second look: a pid reused in between reads ``gone``."""
    if not any(s.state == "D" for s in samples):
        return samples
    sleep(wait_s)
    start = (starts or {}).get
    return tuple(
        read_rank(s.rank, s.pid, start(s.rank), proc=proc, clock=clock) if s.state == "D" else s for s in samples
    )
