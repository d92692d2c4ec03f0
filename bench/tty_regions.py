"""Which screen rows a terminal program rewrites, from its saved output (``bench/tui_cpu.py --save``).

Splits the stream at cursor moves (``ESC[row;colH``) and sums the bytes written after each move per row, so the
panes that cost the most bytes show up. ``python3 bench/tty_regions.py /tmp/tb/amdtop_screen_0.bin``
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")


def main() -> int:
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
