"""CPU of the stall verdicts per tick: 8 GPUs, 3 workers, 64 rank processes (real processes: ``sleep``, 4 of them
stopped with SIGSTOP so the verdicts and the flag are exercised).

Two parts, measured separately because they run at different cadences:
- ``judge``: :meth:`StallTracker.judge` over the three workers' latest looks (what every tick of the pipeline runs),
  each tick with a new look at the ranks (the worst case);
- ``look``: one look at the 64 rank processes as the supervisor takes it with each status pass (every 2 s, so half of
  it falls on a 1 s tick): samples built from the ``stat`` lines its process table already read (no extra read);
- ``read``: the same look read afresh (``read_rank``: one ``/proc/PID/stat`` read each), the path of a rank whose
  process left the table.
Peer, in the same run: the same look through psutil (``Process.oneshot()``: status, cpu_times, num_threads).

    .venv/bin/python bench/stall_health.py --rounds 5 --ticks 2000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from dataclasses import replace

import psutil

from amdtop.health.rankproc import read_rank, sample_of
from amdtop.health.stall import StallTracker, instant_health
from amdtop.model import EngineStats, WorkerState, WorkerStatus
from amdtop.supervisor.procs import ProcStat, read_stat
from amdtop.telemetry.sim import SimBackend

RANKS_PER_WORKER = (32, 16, 16)
GPUS = ((0, 1, 2, 3), (4, 5), (6, 7))


def look(workers: list[WorkerStatus], procs: list[list[int]]) -> list[WorkerStatus]:
    """A fresh look at every rank (what the supervisor's status pass does), as new worker statuses."""
    out = []
    for w, pids in zip(workers, procs, strict=True):
        ranks = tuple(read_rank(r, p) for r, p in enumerate(pids))
        out.append(replace(w, ranks=ranks, health=instant_health(ranks, w.name)))
    return out


def table_look(workers: list[WorkerStatus], table: dict[int, ProcStat]) -> list[WorkerStatus]:
    """The look the supervisor takes: rank samples from the process table its status pass already read."""
    now = time.monotonic()
    out = []
    for w in workers:
        ranks = []
        for r, pid in w.rank_pids:
            st = table[pid]
            ranks.append(sample_of(r, pid, st.state, st.cpu_ticks, st.threads, now))
        out.append(replace(w, ranks=tuple(ranks), health=instant_health(tuple(ranks), w.name)))
    return out


def psutil_look(procs: list[list[int]]) -> None:
    for pids in procs:
        for pid in pids:
            p = psutil.Process(pid)
            with p.oneshot():
                p.status()
                p.cpu_times()
                p.num_threads()


def per_call(fn: object, n: int) -> float:
    """Median CPU seconds of ``fn()`` over ``n`` calls, in batches of 10."""
    costs = []
    for _ in range(max(1, n // 10)):
        start = time.process_time()
        for _ in range(10):
            fn()  # type: ignore[operator]
        costs.append((time.process_time() - start) / 10)
    return statistics.median(costs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ticks", type=int, default=2000)
    a = ap.parse_args()
    sim = SimBackend()
    snap = sim.sample()
    children = [subprocess.Popen(["sleep", "3600"]) for _ in range(sum(RANKS_PER_WORKER))]
    try:
        pids, i = [], 0
        for n in RANKS_PER_WORKER:
            pids.append([c.pid for c in children[i : i + n]])
            i += n
        for w in pids:  # one stopped rank in each worker, and a second in the first
            os.kill(w[1], signal.SIGSTOP)
        os.kill(pids[0][5], signal.SIGSTOP)
        time.sleep(0.2)
        engine = EngineStats(running=0.0, waiting=0.0, gen_tokens_total=1000.0, requests_started=10.0,
                             requests_finished=6.0)  # fmt: skip
        base = [
            WorkerStatus(f"w{k}", WorkerState.READY, GPUS[k], engine=engine, rank_pids=tuple(enumerate(pids[k])))
            for k in range(3)
        ]
        workers = look(base, pids)
        table = {c.pid: st for c in children if (st := read_stat(c.pid)) is not None}
        results: dict[str, list[float]] = {"judge_us": [], "look_us": [], "read_us": [], "psutil_read_us": []}
        for _ in range(a.rounds):
            tracker = StallTracker(raise_after_s=0.0)
            flip = [workers, [replace(w, ranks=tuple(replace(r, at=r.at + 1) for r in w.ranks)) for w in workers]]
            n = [0]

            def tick(tracker: StallTracker = tracker, flip: list[list[WorkerStatus]] = flip, n: list[int] = n) -> None:
                # Each tick carries a new look (worst case: the supervisor looks every 2 s against a 1 s tick).
                n[0] += 1
                flags = tracker.judge(flip[n[0] % 2], snap)
                assert len(flags) == 3

            results["judge_us"].append(per_call(tick, a.ticks) * 1e6)
            results["look_us"].append(per_call(lambda: table_look(base, table), a.ticks // 10) * 1e6)
            results["read_us"].append(per_call(lambda: look(base, pids), a.ticks // 10) * 1e6)
            results["psutil_read_us"].append(per_call(lambda: psutil_look(pids), a.ticks // 10) * 1e6)
        med = {k: statistics.median(v) for k, v in results.items()}
        med["per_tick_us"] = med["judge_us"] + med["look_us"] / 2
        med["psutil_over_read"] = med["psutil_read_us"] / med["read_us"]
        print(json.dumps({"rounds": a.rounds, "ticks": a.ticks, "ranks": len(children), "median": med,
                          "all": results}, indent=1))  # fmt: skip
    finally:
        for c in children:
            os.kill(c.pid, signal.SIGCONT)
            c.kill()
            c.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
