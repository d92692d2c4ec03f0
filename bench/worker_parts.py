"""CPU per worker of each part of watching workers, for 1, 3 and 8 simulated workers: the scrape, procfs, numa_maps and
the log tail, and the whole pipeline tick beside them.

The workers are the demo's simulated vLLM servers (``python -m amdtop.simserver``: real processes serving real HTTP on
loopback; their log files get RCCL init lines, vLLM's periodic engine stats line and an access line per request,
amdtop's own scrapes among them), launched by the supervisor from
a demo-like profile file of N TP=1 workers on GPUs 0..N-1 of the simulated 8-GPU node. The pipeline is the one the
dashboard runs (``follow_logs``, discovery on, the demo load fed to the sim node) with the workers' cadence at every
tick, so each tick runs each part once. Parts are timed where they run (thread CPU time, inclusive):

- ``scrape``: ``Prober.health``, ``Prober.scrape`` (``/metrics``) and ``Prober.load`` of every worker;
- ``procfs``: the supervisor's status pass (its process table, each worker's tree, ranks, shared memory, state
  records) less the scrape inside it;
- ``log_tail``: ``LogMonitor.poll`` (every worker's log followed, new lines read and parsed);
- ``numa_maps``: one ``/proc/PID/numa_maps`` read and sum per worker process (``amdtop.audit.numa_maps``), as the
  tuning audit reads it every ``AUDIT_EVERY_S`` (30 s), not every tick; reported per read;
- ``tick``: ``NodePipeline.tick`` as a whole.

Cases (N) are interleaved ``--rounds`` times; medians of ``--ticks`` ticks per case and round, then the median over
rounds; ``per_worker`` divides by N, ``slope`` is (part at 8 - part at 1) / 7.

    .venv/bin/python bench/worker_parts.py --rounds 3 --ticks 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amdtop.audit.numa_maps import node_kib
from amdtop.logread.rccl.monitor import LogMonitor
from amdtop.pipeline import NodePipeline
from amdtop.procinfo import read_seq_file
from amdtop.supervisor import Supervisor
from amdtop.supervisor.demo import DEMO_FILE
from amdtop.supervisor.metrics import Prober
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS

SPENT: dict[str, float] = defaultdict(float)


def timed(owner: Any, name: str, part: str) -> None:
    """Wrap ``owner.name`` to add its thread CPU time to ``SPENT[part]`` (outermost call only: no double count)."""
    inner: Callable[..., Any] = getattr(owner, name)
    depth = [0]

    def wrapper(*args: Any, **kw: Any) -> Any:
        depth[0] += 1
        start = time.thread_time()
        try:
            return inner(*args, **kw)
        finally:
            depth[0] -= 1
            if not depth[0]:
                SPENT[part] += time.thread_time() - start

    setattr(owner, name, wrapper)


def profiles(n: int, port_base: int) -> str:
    """A demo-like profile file: ``n`` TP=1 simulated servers, one per GPU, RCCL INFO in their logs."""
    cmd = ", ".join(f'"{c}"' for c in (sys.executable, "-m", "amdtop.simserver"))
    return "".join(
        f'\n[[worker]]\nname = "sim-{i}"\nmodel = "mistralai/Mistral-7B-Instruct-v0.3"\ngpus = [{i}]\n'
        f'numa_node = "auto"\nport = {port_base + i}\ncommand = [{cmd}]\n'
        "[worker.args]\nmax-num-seqs = 64\ngpu-memory-utilization = 0.9\ncapacity = 32\ntokens-per-s = 90.0\n"
        'ttft-ms = 60\nbackground-load = 25\n[worker.env]\nNCCL_DEBUG = "INFO"\n'
        for i in range(n)
    )


def start(n: int, port_base: int, sim: SimBackend) -> Supervisor:
    state = Path(tempfile.mkdtemp(prefix=f"amdtop-parts-{n}-"))
    (state / DEMO_FILE).write_text(profiles(n, port_base))
    sup = Supervisor(state / "none.toml", state, gate=PASS, topology=sim.topology(), demo=True, sim=sim)
    for name in sup.names():
        sup.launch(name)
    for name in sup.names():
        sup.wait_ready(name, timeout=120)
    return sup


def numa_reads(sup: Supervisor) -> tuple[float, int]:
    """CPU seconds of one numa_maps read and sum of every process of every worker; the number of processes."""
    pids = [pid for st in sup.status() for pid in (st.pids or (st.pid,)) if pid]
    start = time.thread_time()
    for pid in pids:
        node_kib(read_seq_file(pid, "numa_maps"))
    return time.thread_time() - start, len(pids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between ticks (the workers log each second)")
    ap.add_argument("--counts", default="1,3,8")
    ap.add_argument("--port-base", type=int, default=28400)
    a = ap.parse_args()
    counts = [int(x) for x in a.counts.split(",")]
    for name in ("health", "scrape", "load"):
        timed(Prober, name, "scrape")
    timed(Supervisor, "status", "status")
    timed(LogMonitor, "poll", "log_tail")
    timed(NodePipeline, "tick", "tick")
    sims = {n: SimBackend() for n in counts}
    sups = {n: start(n, a.port_base + 20 * i, sims[n]) for i, n in enumerate(counts)}
    runs: dict[int, dict[str, list[float]]] = {n: defaultdict(list) for n in counts}
    procs: dict[int, int] = {}
    try:
        for _ in range(a.rounds):
            for n in counts:
                sup = sups[n]
                pipe = NodePipeline(
                    sims[n], sup, discover=True, demo_load=sup.demo_load(), follow_logs=True, workers_every_s=0.0
                )
                pipe.tick()  # the first tick reads each log from its start: not a steady tick
                per_tick: dict[str, list[float]] = defaultdict(list)
                for _ in range(a.ticks):
                    time.sleep(a.interval)
                    SPENT.clear()
                    pipe.tick()
                    for part in ("tick", "status", "scrape", "log_tail"):
                        per_tick[part].append(SPENT.get(part, 0.0))
                pipe.close()
                for part, values in per_tick.items():
                    runs[n][part].append(statistics.median(values))
                reads = [numa_reads(sup) for _ in range(5)]
                runs[n]["numa_maps"].append(statistics.median(r[0] for r in reads))
                procs[n] = reads[0][1]
    finally:
        for sup in sups.values():
            for name in sup.names():
                sup.stop(name, grace=2)
            sup.close()
    ms: dict[int, dict[str, float]] = {}
    for n in counts:
        med = {part: statistics.median(v) * 1e3 for part, v in runs[n].items()}
        med["procfs"] = med.pop("status") - med["scrape"]
        ms[n] = med
    parts = ("scrape", "procfs", "log_tail", "numa_maps", "tick")
    out: dict[str, Any] = {
        "ms_per_tick": {n: {p: round(ms[n][p], 3) for p in parts} for n in counts},
        "ms_per_worker": {n: {p: round(ms[n][p] / n, 3) for p in parts} for n in counts},
        "worker_processes": procs,
    }
    if 1 in ms and 8 in ms:
        out["slope_ms_per_added_worker"] = {p: round((ms[8][p] - ms[1][p]) / 7, 3) for p in parts}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
