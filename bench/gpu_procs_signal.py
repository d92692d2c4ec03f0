"""Signals on a real GPU process through the Processes pane's core: TERM, then KILL for one that ignores TERM.

Run on the GPU machine with the pid of a CUDA process that ignores SIGTERM (amdtop runs as the same user):
``python3 bench/gpu_procs_signal.py --pid PID``. Prints one JSON document: each step's plan, outcome and whether
NVML still lists the pid afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amdtop.gpuprocs.signals import Refusal, plan_signal, send_signal
from amdtop.pipeline import NodePipeline
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import open_backend


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--wait", type=float, default=3.0)
    args = ap.parse_args()
    pipeline = NodePipeline(open_backend(BackendOptions()), discover=False)
    pipeline.tick()
    steps = []
    termed: set[tuple[int, float | None]] = set()
    for _ in range(2):
        frame = pipeline.tick()
        row = next((r for r in frame.processes if r.pid == args.pid), None)
        if row is None:
            steps.append({"listed": False})
            break
        plan = plan_signal(row, readonly=False, euid=os.geteuid(), termed=frozenset(termed))
        readonly = plan_signal(row, readonly=True, euid=os.geteuid())
        if isinstance(plan, Refusal):
            steps.append({"listed": True, "refused": plan.reason})
            break
        outcome = send_signal(plan)
        termed.add((row.pid, row.started_at))
        time.sleep(args.wait)
        after = pipeline.tick()
        steps.append({
            "listed": True, "signal": plan.name, "question": plan.question, "outcome": outcome,
            "readonly_refusal": readonly.reason if isinstance(readonly, Refusal) else None,
            "row": {"user": row.user, "command": row.command, "vram_bytes": row.vram_bytes, "owner": row.owner,
                    "gpu_util_pct": row.gpu_util_pct, "cpu_pct": row.cpu_pct, "elapsed_s": row.elapsed_s},
            "listed_after": any(r.pid == args.pid for r in after.processes),
        })  # fmt: skip
    print(json.dumps({"pid": args.pid, "steps": steps}, indent=1))
    pipeline.backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
