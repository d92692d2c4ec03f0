"""Where a process's resident memory is: ``/proc/PID/smaps`` summed per mapping (a library, the heap, anonymous
arenas), largest first, to find what the in-process dashboard holds that the viewer and nvitop do not.

    python3 bench/rss_map.py PID [--top 25] [--anon]

``--anon`` (session 14) also sorts the anonymous resident memory by the size class of its mapping: glibc's
per-thread malloc arenas (64 MiB reservations), thread stacks (8 MiB), pymalloc's arenas (256 KiB-1 MiB) and the
rest, which tells a thread's arena from Python's objects and from a library's own allocations.
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
    ap.add_argument("--anon", action="store_true", help="anonymous memory per mapping size class")
    a = ap.parse_args()
    rss: collections.Counter[str] = collections.Counter()
    anon: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    name = "?"
    size = 0
    with open(f"/proc/{a.pid}/smaps") as fh:
        for line in fh:
            m = HEADER.match(line)
            if m:
                name = m.group(1).strip() or "[anonymous]"
            elif line.startswith("Size:"):
                size = int(line.split()[1])
            elif line.startswith("Rss:"):
                kib = int(line.split()[1])
                rss[name] += kib
                if name == "[anonymous]" and kib:
                    klass = _size_class(size)
                    anon[klass] += kib
                    count[klass] += 1
    total = sum(rss.values())
    print(f"pid {a.pid}: {total / 1024:.1f} MiB resident")
    for mapping, kib in rss.most_common(a.top):
        print(f"{kib / 1024:8.1f} MiB  {mapping}")
    if a.anon:
        print("anonymous, by mapping size:")
        for klass, kib in anon.most_common():
            print(f"{kib / 1024:8.1f} MiB  {count[klass]:4d} mappings of {klass}")
    return 0


def _size_class(kib: int) -> str:
    for limit, label in ((256, "<=256 KiB"), (1024, "256 KiB-1 MiB"), (8 * 1024 + 4, "1-8 MiB (thread stacks)"),
                         (60 * 1024, "8-60 MiB"), (65 * 1024, "60-65 MiB (malloc arenas)")):  # fmt: skip
        if kib <= limit:
            return label
    return ">65 MiB"


if __name__ == "__main__":
    raise SystemExit(main())
