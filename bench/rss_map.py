"""Where a process's resident memory is: ``/proc/PID/smaps`` summed per mapping (a library, the heap, anonymous
arenas), largest first, to find what the in-process dashboard holds that the viewer and nvitop do not.

    python3 bench/rss_map.py PID [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import re

HEADER = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    rss: collections.Counter[str] = collections.Counter()
    name = "?"
    with open(f"/proc/{a.pid}/smaps") as fh:
        for line in fh:
            m = HEADER.match(line)
            if m:
                name = m.group(1).strip() or "[anonymous]"
            elif line.startswith("Rss:"):
                rss[name] += int(line.split()[1])
    total = sum(rss.values())
    print(f"pid {a.pid}: {total / 1024:.1f} MiB resident")
    for mapping, kib in rss.most_common(a.top):
        print(f"{kib / 1024:8.1f} MiB  {mapping}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
