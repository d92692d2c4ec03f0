"""CPU of reading ``/proc/PID/stat`` of every process: ``Path.read_text`` (what ``procs.read_stat`` used) against
``amdtop.procinfo.read_proc_bytes`` (``os.open``/``os.read``), with N extra sleeping processes; and a whole
``procs.scan``. Medians of ``--rounds``.

    .venv/bin/python bench/proc_scan.py --procs 2000 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from amdtop.procinfo import read_proc_bytes
from amdtop.supervisor import procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(a.procs)]
    try:
        time.sleep(1)
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]

        def pathlib_reads() -> None:
            for pid in pids:
                try:
                    (Path("/proc") / str(pid) / "stat").read_text()
                except OSError:
                    pass

        def os_reads() -> None:
            for pid in pids:
                try:
                    read_proc_bytes(pid, "stat").decode()
                except OSError:
                    pass

        cases: dict[str, Callable[[], object]] = {
            "Path.read_text": pathlib_reads,
            "read_proc_bytes": os_reads,
            "procs.scan": procs.scan,
        }
        results: dict[str, list[float]] = {}
        for _ in range(a.rounds):
            for name, run in cases.items():
                start = time.process_time()
                run()
                results.setdefault(name, []).append(time.process_time() - start)
        base = statistics.median(results["read_proc_bytes"])
        print(f"{len(pids)} processes")
        for name, runs in results.items():
            med = statistics.median(runs)
            print(f"{name:16s} {med * 1e3:7.2f} ms ({med / base:.2f}x read_proc_bytes)")
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
