"""Which screen rows a terminal program rewrites, from its saved output (``bench/tui_cpu.py --save``).

Splits the stream at cursor moves (``ESC[row;colH``) and sums the bytes written after each move per row, so the
panes that cost the most bytes show up. ``python3 bench/tty_regions.py /tmp/tb/amdtop_screen_0.bin``

``--ticks N`` (session 14) prints instead the bytes of each of the last N steady ticks and their median: a tick is
what lies between two writes of the header's clock (``ESC[1;197H`` / ``ESC[1;198H``, its seconds), so first paints
and relayouts show as outliers, not in the median.
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")


CLOCK = re.compile(rb"\x1b\[1;19[78]H")


def ticks(data: bytes, last: int) -> int:
    starts = [m.start() for m in CLOCK.finditer(data)]
    sizes = [b - a for a, b in pairwise(starts)][-last:]
    if not sizes:
        print("no clock writes: not an amdtop screen at 200 columns?")
        return 1
    print(f"bytes per tick, last {len(sizes)}: {sorted(sizes)}; median {statistics.median(sizes)}")
    return 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[2] == "--ticks":
        return ticks(Path(sys.argv[1]).read_bytes(), int(sys.argv[3]))
    data = Path(sys.argv[1]).read_bytes()
    per_row: Counter[int] = Counter()
    cols: dict[int, set[int]] = {}
    moves = list(MOVE.finditer(data))
    for i, m in enumerate(moves):
        end = moves[i + 1].start() if i + 1 < len(moves) else len(data)
        row, col = int(m.group(1)), int(m.group(2))
        per_row[row] += end - m.start()
        cols.setdefault(row, set()).add(col)
    total = sum(per_row.values())
    print(f"{len(data)} bytes, {len(moves)} cursor moves")
    for row, n in sorted(per_row.items()):
        print(f"row {row:3d}: {n:8d} bytes ({100 * n / total:4.1f} %), columns {sorted(cols[row])[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
