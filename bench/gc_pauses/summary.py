"""Sum the collector's pauses logged by ``bench/gc_pauses/sitecustomize.py``, per process and generation.

    python3 bench/gc_pauses/summary.py DIR [--after SECONDS]

``--after``: only passes later than that many seconds after each process's first logged pass (leave start-up out).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--after", type=float, default=0.0)
    a = ap.parse_args()
    for log in sorted(a.dir.glob("gc_*.log")):
        lines = log.read_text().splitlines()
        argv = lines[0][2:] if lines and lines[0].startswith("# ") else "?"
        rows = [line.split() for line in lines if line and not line.startswith("#")]
        if not rows:
            continue
        t0, t1 = float(rows[0][0]), float(rows[-1][0])
        per: dict[str, list[float]] = defaultdict(list)
        for stamp, gen, pause, _collected in rows:
            if float(stamp) - t0 >= a.after:
                per[gen].append(float(pause))
        span = max(t1 - t0 - a.after, 1e-9)
        total = sum(sum(v) for v in per.values())
        print(f"{log.name}: {argv[:100]}")
        print(f"  {span:.0f} s: {total:.1f} ms paused ({100 * total / 1000 / span:.3f} % of a core)")
        for gen in sorted(per):
            v = per[gen]
            print(f"  gen{gen}: {len(v)} passes, {sum(v):.1f} ms, longest {max(v):.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
