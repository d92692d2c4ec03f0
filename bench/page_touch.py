"""What this VM charges for touching memory after an idle gap: microseconds per 4 KiB page written, for pages that
were last touched ``gap`` seconds earlier (the process sleeps in between).

On a machine without the effect every gap costs about the same (tens of nanoseconds a page). On this project's
Firecracker VMs it grows with the gap, roughly linearly up to 1-3 s: a process that touches the same N pages once a
second pays about N times the ``1.0`` figure per second, however little it computes on them. That cost varies from
hour to hour, and it is why the dashboard's CPU (and every Python app's, the Textual floor included) varies 5-10x
between sittings while its hot set (``bench/tui_cpu.py``'s ``hot_kib_per_s``) stays put.

    python3 bench/page_touch.py
"""

from __future__ import annotations

import json
import mmap
import statistics
import time

PAGE = 4096


def page_cost_us(gap: float, pages: int = 4096, reps: int = 5) -> float:
    """Median microseconds per page to write one byte in each of ``pages`` pages, ``gap`` seconds after the last
    write to them."""
    buf = mmap.mmap(-1, pages * PAGE)
    for i in range(0, pages * PAGE, PAGE):
        buf[i] = 1
    costs = []
    for _ in range(reps):
        time.sleep(gap)
        start = time.perf_counter()
        for i in range(0, pages * PAGE, PAGE):
            buf[i] = 2
        costs.append((time.perf_counter() - start) / pages * 1e6)
    buf.close()
    return statistics.median(costs)


def main() -> int:
    print(json.dumps({f"us_per_page_after_{g}s": round(page_cost_us(g), 3) for g in (0.0, 0.05, 0.2, 1.0, 3.0)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
