"""One found-server family walk (``amdtop.analysis.discover.vllm_family``) of a process with 40 threads and two
children, as a busy GPU's CUDA process has (issue 53, session 25): microseconds per walk, median of ``--rounds``.
Run it with ``PYTHONPATH=DIR`` on another tree (``git archive REV amdtop``) for the before.

    .venv/bin/python bench/family_walk.py --rounds 5
    PYTHONPATH=tmp/base .venv/bin/python -P bench/family_walk.py --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import timeit

from amdtop.analysis.discover import vllm_family

CHILD = (
    "import threading, time, subprocess\n"
    "[threading.Thread(target=time.sleep, args=(600,), daemon=True).start() for _ in range(40)]\n"
    "kids = [subprocess.Popen(['sleep', '600']) for _ in range(2)]\n"
    "time.sleep(600)\n"
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--walks", type=int, default=300)
    args = ap.parse_args()
    # The name check (session 25) skips a process that names no server: this one says "vllm" in its argv, so both
    # trees walk it and the figure is the walk's own cost.
    child = subprocess.Popen([sys.executable, "-c", CHILD, "vllm"], start_new_session=True)
    try:
        time.sleep(1.5)
        found = vllm_family({child.pid})
        per = [
            timeit.timeit(lambda: vllm_family({child.pid}), number=args.walks) / args.walks for _ in range(args.rounds)
        ]
        print(f"vllm_family of a 41-thread process: {statistics.median(per) * 1e6:.0f} us per walk "
              f"(rounds {', '.join(f'{p * 1e6:.0f}' for p in per)}); {len(found)} processes")  # fmt: skip
    finally:
        child.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
