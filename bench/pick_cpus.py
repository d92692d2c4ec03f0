"""Print "PIN LOADCPUS" for bench/h200_side_by_side.sh PIN=...: 5 CPUs on distinct physical cores (CPU 0 left out),
then the CPUs of the other cores, for the busy step's GPU load (session 20).

    read PIN LOADCPUS < <(python3 bench/pick_cpus.py); export PIN LOADCPUS
"""

from __future__ import annotations

import glob
from pathlib import Path


def main() -> int:
    cores: dict[tuple[str, str], list[int]] = {}
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*"), key=lambda p: int(p.rsplit("cpu", 1)[1])):
        cpu = int(d.rsplit("cpu", 1)[1])
        try:
            key = (
                Path(d, "topology/physical_package_id").read_text().strip(),
                Path(d, "topology/core_id").read_text().strip(),
            )
        except OSError:
            key = ("0", str(cpu))
        cores.setdefault(key, []).append(cpu)
    groups = [g for g in cores.values() if 0 not in g]
    pin = [g[0] for g in groups[:5]]
    load = [c for g in groups[5:] for c in g]
    print(",".join(map(str, pin)), ",".join(map(str, load)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
