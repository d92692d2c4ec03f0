"""CPU of one node-pipeline tick on the demo node: read-only (no workers) against the three demo workers, each with and
without N unrelated sleeping processes on the host; the old full procfs walk per status and discovery as the peer.

The read-only case runs what ``amdtop --demo --readonly`` runs: a read-only supervisor as the worker source (it still
looks for launches of its state dir). ``full_walk_ms`` is one status pass with the full procfs walk the supervisor
makes every 30 s (the table of every process, and the search for lost launches by environment marker), median of 5.

The demo workers are real processes (``python -m amdtop.simserver`` under the supervisor); the tick is what the TUI,
the exporter and ``snapshot`` run. Each case ticks ``--ticks`` times at ``--interval`` and reports the median CPU
(``time.process_time``) per tick; cases are interleaved ``--rounds`` times.

    .venv/bin/python bench/pipeline_tick.py --rounds 3 --ticks 30 --procs 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from amdtop.analysis.discover import discover_vllm
from amdtop.pipeline import NodePipeline
from amdtop.supervisor import Supervisor, procs
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS


def tick_cpu(pipeline: NodePipeline, ticks: int, interval: float, extra: object = None) -> float:
    """Median CPU seconds per tick (``extra`` is a callable run inside each tick: the old per-tick walks)."""
    costs = []
    for _ in range(ticks):
        start = time.process_time()
        pipeline.tick()
        if callable(extra):
            extra()
        costs.append(time.process_time() - start)
        time.sleep(interval)
    return statistics.median(costs)


def owned(sup: Supervisor) -> object:
    """``sup`` behind its owner thread (amdtop.supervisor.owner) where this checkout has one, else ``sup`` itself
    (a baseline run with PYTHONPATH at an older checkout)."""
    try:
        from amdtop.supervisor.owner import SupervisorOwner
    except ImportError:
        return sup
    return SupervisorOwner(sup)


def old_walks() -> None:
    """What each tick cost before: a full procfs table per supervisor status and a full discovery walk."""
    procs.scan()
    discover_vllm(Path("/proc"), {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("--procs", type=int, default=2000, help="unrelated sleeping processes in the busy-host cases")
    a = ap.parse_args()
    sim = SimBackend()
    state = Path(tempfile.mkdtemp(prefix="amdtop-bench-"))
    sup = Supervisor(
        state / "none.toml", state, gate=PASS, topology=sim.topology(), demo=True, sim=sim, demo_port_base=18350
    )
    for name in sup.names():
        sup.launch(name)
    for name in sup.names():
        sup.wait_ready(name, timeout=60)
    ro_state = Path(tempfile.mkdtemp(prefix="amdtop-bench-ro-"))
    ro_sup = Supervisor(
        ro_state / "none.toml", ro_state, gate=PASS, topology=sim.topology(), demo=True, sim=sim, readonly=True
    )
    sleepers: list[subprocess.Popen[bytes]] = []
    results: dict[str, list[float]] = {}
    walks: dict[str, list[float]] = {}
    try:
        for _ in range(a.rounds):
            for busy in (False, True):
                if busy and not sleepers:
                    sleepers = [subprocess.Popen(["sleep", "3600"]) for _ in range(a.procs)]
                if not busy and sleepers:
                    for p in sleepers:
                        p.kill()
                    for p in sleepers:
                        p.wait()
                    sleepers = []
                suffix = f"+{a.procs}procs" if busy else ""
                # The worker source as the dashboard wires it: the supervisor's owner thread where the code has one.
                readonly = NodePipeline(sim, owned(ro_sup), discover=True)
                workers = NodePipeline(sim, owned(sup), discover=True, demo_load=sup.demo_load(), follow_logs=True)
                results.setdefault(f"readonly{suffix}", []).append(tick_cpu(readonly, a.ticks, a.interval))
                results.setdefault(f"workers{suffix}", []).append(tick_cpu(workers, a.ticks, a.interval))
                results.setdefault(f"workers+old-walks{suffix}", []).append(
                    tick_cpu(workers, a.ticks, a.interval, old_walks)
                )
                workers.close()
                for name, who in (("readonly", ro_sup), ("workers", sup)):
                    for _ in range(5):
                        who._full_scan_at = None  # the 30 s cadence's walk, now
                        start = time.process_time()
                        who.status()
                        walks.setdefault(f"{name}{suffix}", []).append(time.process_time() - start)
    finally:
        for p in sleepers:
            p.kill()
        for name in sup.names():
            sup.stop(name, grace=2)
        sup.close()
    med = {k: statistics.median(v) * 1e3 for k, v in results.items()}
    out = {
        "ms_per_tick": {k: round(v, 3) for k, v in med.items()},
        "runs": {k: [round(x * 1e3, 3) for x in v] for k, v in results.items()},
    }
    busy = f"+{a.procs}procs"
    out["full_walk_ms"] = {k: round(statistics.median(v) * 1e3, 2) for k, v in walks.items()}
    out["ratios"] = {
        "workers/readonly": round(med["workers"] / med["readonly"], 2),
        f"workers{busy}/workers": round(med[f"workers{busy}"] / med["workers"], 2),
        f"readonly{busy}/readonly": round(med[f"readonly{busy}"] / med["readonly"], 2),
        f"old-walks{busy}/old-walks": round(med[f"workers+old-walks{busy}"] / med["workers+old-walks"], 2),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
