"""A real vLLM (CPU) worker's ``/proc/PID/numa_maps`` read, timed against its address space.

Launches the e2e suite's TP=1 CPU worker (``tests/e2e/conftest.py``: the tiny Llama, ``--enforce-eager``) through the
supervisor, waits for it to be ready, and for each of its processes (the API server and EngineCore) reads and sums
``numa_maps`` as the tuning audit does (``amdtop.audit.numa_maps.node_kib``) ``--reads`` times: CPU (thread time)
and wall per read, beside the process's mapping count (lines of ``numa_maps``), VSZ and RSS. The simulated demo
server (``python -m amdtop.simserver``) is read the same way as the peer. The audit reads it every
``AUDIT_EVERY_S``; the cost per second of watching is the read over that.

    .venv/bin/python bench/numa_maps_vllm.py --reads 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from amdtop.audit.numa_maps import node_kib
from amdtop.procinfo import read_seq_file
from amdtop.thresholds import AUDIT_EVERY_S
from tests.e2e.conftest import e2e_supervisor, profile_toml, require_vllm


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def read_cost(pid: int, reads: int) -> dict[str, Any]:
    cpu, wall = [], []
    text = b""
    for _ in range(reads):
        t0, c0 = time.perf_counter(), time.thread_time()
        text = read_seq_file(pid, "numa_maps")
        node_kib(text)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    return {
        "pid": pid,
        "comm": comm,
        "mappings": text.count(b"\n"),
        "numa_maps_bytes": len(text),
        "vsz_mib": round(status_kib(pid, "VmSize") / 1024),
        "rss_mib": round(status_kib(pid, "VmRSS") / 1024),
        "read_cpu_ms": round(statistics.median(cpu) * 1e3, 3),
        "read_wall_ms": round(statistics.median(wall) * 1e3, 3),
        "share_of_one_core_at_audit_cadence_pct": round(statistics.median(cpu) / AUDIT_EVERY_S * 100, 4),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--port", type=int, default=28600)
    a = ap.parse_args()
    require_vllm()
    root = Path(tempfile.mkdtemp(prefix="amdtop-numa-vllm-"))
    (root / "workers.toml").write_text(profile_toml("numa", a.port, eager=True))
    sup = e2e_supervisor(root)
    sim = subprocess.Popen(
        [sys.executable, "-m", "amdtop.simserver", "--model", "sim", "--port", str(a.port + 1)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    t0 = time.monotonic()
    try:
        sup.launch("numa")
        sup.wait_ready("numa", timeout=600)
        ready_s = time.monotonic() - t0
        st = next(s for s in sup.status() if s.name == "numa")
        pids = sorted({p for p in (*st.pids, st.pid) if p})
        out = {
            "ready_s": round(ready_s, 1),
            "audit_every_s": AUDIT_EVERY_S,
            "vllm": [read_cost(pid, a.reads) for pid in pids],
            "simserver": read_cost(sim.pid, a.reads),
        }
    finally:
        sup.stop("numa", grace=30)
        sup.close()
        sim.terminate()
        sim.wait()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
