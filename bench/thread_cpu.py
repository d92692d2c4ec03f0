"""CPU of every thread of some processes over a window, from each thread's schedstat (nanoseconds on a CPU), to see
which thread of a viewer and its serve costs what (session 14, issue 33: the pair against the in-process dashboard).

    python3 bench/thread_cpu.py SECONDS PID [PID...]

Thread names are the kernel's ``comm`` (Python threads all read ``python`` unless named); ``py-spy dump --pid PID``
maps a thread id to its Python thread.
"""

from __future__ import annotations

import os
import sys
import time


def _snap(pids: list[int]) -> dict[tuple[int, int], tuple[int, str]]:
    out = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    ns = int(fh.read().split()[0])
                with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                    comm = fh.read().strip()
            except OSError:
                continue
            out[(pid, int(tid))] = (ns, comm)
    return out


def main() -> int:
    if len(sys.argv) < 3:
        raise SystemExit("usage: thread_cpu.py SECONDS PID [PID...]")
    secs, pids = float(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    before = _snap(pids)
    time.sleep(secs)
    after = _snap(pids)
    totals: dict[int, int] = {}
    for (pid, tid), (ns, comm) in sorted(after.items()):
        spent = ns - before.get((pid, tid), (0, comm))[0]
        totals[pid] = totals.get(pid, 0) + spent
        print(f"{pid:>7} {tid:>7} {comm:20s} {100 * spent / 1e9 / secs:7.3f} % of a core")
    for pid, spent in totals.items():
        print(f"{pid:>7} total {100 * spent / 1e9 / secs:.3f} % of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
